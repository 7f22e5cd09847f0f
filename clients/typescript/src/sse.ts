/** Server-sent events as the dispatcher writes them (`id:`, `event:`, `data:` lines, an
 * empty line ending each event, `:` comments as heartbeats). */

/** One event: its name (`step`, `delta`, `action`, `execution`, `error`, `done`; `result`
 * and `gap` on the results stream), its data parsed from JSON, and its id. */
export interface StreamEvent<T = unknown> {
  event: string;
  data: T;
  id?: string;
}

/** Turns text pieces into events; feed() returns the events each piece completed. An
 * event's data over `maxEventBytes` characters throws rather than growing without bound. */
export class EventParser {
  private buffer = "";
  private name = "message";
  private data: string[] = [];
  private size = 0;
  private id: string | undefined;

  constructor(private readonly maxEventBytes = 16 << 20) {}

  feed(text: string): StreamEvent[] {
    this.buffer += text;
    const out: StreamEvent[] = [];
    for (;;) {
      const end = this.buffer.indexOf("\n");
      if (end < 0) break;
      const line = this.buffer.slice(0, end).replace(/\r$/, "");
      this.buffer = this.buffer.slice(end + 1);
      this.line(line, out);
    }
    if (this.buffer.length > this.maxEventBytes) {
      throw new Error(`a line of the stream is over ${this.maxEventBytes} characters`);
    }
    return out;
  }

  private line(line: string, out: StreamEvent[]): void {
    if (line === "") {
      if (this.data.length > 0) {
        const event: StreamEvent = { event: this.name, data: JSON.parse(this.data.join("\n")) };
        if (this.id !== undefined) event.id = this.id;
        out.push(event);
      }
      this.name = "message";
      this.data = [];
      this.size = 0;
      this.id = undefined;
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.name = value;
    else if (field === "id") this.id = value;
    else if (field === "data") {
      this.size += value.length;
      if (this.size > this.maxEventBytes) {
        throw new Error(`an event's data is over ${this.maxEventBytes} characters`);
      }
      this.data.push(value);
    }
  }
}
