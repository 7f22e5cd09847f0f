/**
 * A client of the agentfleet HTTP API over fetch.
 *
 *     import { Client } from "@agentfleet/client";
 *     const fleet = new Client({ url: "http://127.0.0.1:8080", apiKey: "af-dev-u1-key" });
 *     const task = await fleet.wait((await fleet.submit("u1", "明天下午三点开会")).task_id);
 *     console.log(task.result?.message);
 */
export * from "./client.js";
export * from "./errors.js";
export { EventParser, type StreamEvent } from "./sse.js";
