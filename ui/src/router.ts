/** Hash routes (#/tasks/ID): the server serves only index.html and the assets under /ui/. */

import { useEffect, useState } from "preact/hooks";

export interface Route {
  /** The path's parts: "#/tasks/abc" is ["tasks", "abc"]. */
  parts: string[];
  query: URLSearchParams;
}

export function currentRoute(): Route {
  const hash = location.hash.replace(/^#\/?/, "");
  const [path = "", query = ""] = hash.split("?", 2);
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query) };
}

export function useRoute(): Route {
  const [route, setRoute] = useState(currentRoute);
  useEffect(() => {
    const changed = () => setRoute(currentRoute());
    addEventListener("hashchange", changed);
    return () => removeEventListener("hashchange", changed);
  }, []);
  return route;
}

export const href = (...parts: string[]) => "#/" + parts.map(encodeURIComponent).join("/");

export function navigate(...parts: string[]): void {
  location.hash = href(...parts).slice(1);
}
