/** The errors the client throws: one class per kind of answer, each carrying the API's
 * `code`, `message` and `path` (the JSON path of the problem, or undefined). */

export class AgentfleetError extends Error {
  override name = "AgentfleetError";
}

/** The request got no answer: the connection failed or was cut, or the call's deadline
 * passed first. */
export class TransportError extends AgentfleetError {
  override name = "TransportError";
}

/** A wait ended before the task or batch did; `last` is what was last seen. */
export class WaitTimeout<T = unknown> extends AgentfleetError {
  override name = "WaitTimeout";
  constructor(
    message: string,
    readonly last: T,
  ) {
    super(message);
  }
}

/** An answer of 4xx or 5xx: `status`, and the API's `{"error":{"code","message","path"}}`;
 * `retryAfter` in seconds when the answer said when to come back. */
export class ApiError extends AgentfleetError {
  override name = "ApiError";
  constructor(
    readonly status: number,
    readonly code: string,
    readonly detail: string,
    readonly path?: string,
    readonly retryAfter?: number,
  ) {
    super(`${status} ${code}${path ? ` at ${path}` : ""}: ${detail}`);
  }
}

/** 400: refused as written (`path` names the field). */
export class BadRequest extends ApiError {
  override name = "BadRequest";
}
/** 401: no key, or one the API does not know. */
export class Unauthorized extends ApiError {
  override name = "Unauthorized";
}
/** 403: the key may not act for that user, or not do that. */
export class Forbidden extends ApiError {
  override name = "Forbidden";
}
/** 404: no such task, batch or route, or one the key may not see. */
export class NotFound extends ApiError {
  override name = "NotFound";
}
/** 409: the state does not allow it (`task_not_ended`, `already_ended`,
 * `idempotency_conflict`, `batch_exists`, `parent_not_ended`), or a short task id stands
 * for several tasks (`ambiguous_id`). */
export class Conflict extends ApiError {
  override name = "Conflict";
}
/** 413: the body is over the route's limit. */
export class PayloadTooLarge extends ApiError {
  override name = "PayloadTooLarge";
}
/** 422: understood, but cannot be done (`cannot_retry`). */
export class Unprocessable extends ApiError {
  override name = "Unprocessable";
}
/** 429: a limit of the caller's (`queue_full`, connections, streams); see `retryAfter`. */
export class TooManyRequests extends ApiError {
  override name = "TooManyRequests";
}
/** 5xx: the fleet could not answer. */
export class ServerError extends ApiError {
  override name = "ServerError";
}

type ApiErrorClass = new (
  status: number,
  code: string,
  detail: string,
  path?: string,
  retryAfter?: number,
) => ApiError;

const byStatus: Record<number, ApiErrorClass> = {
  400: BadRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  413: PayloadTooLarge,
  422: Unprocessable,
  429: TooManyRequests,
};

/** The error an answer of `status` with `body` stands for; a body that is not the API's
 * error object (a proxy's page, say) is coded `http_<status>`. */
export function errorFor(status: number, body: string, retryAfter?: number): ApiError {
  let code = `http_${status}`;
  let detail = body.slice(0, 500);
  let path: string | undefined;
  try {
    const parsed: unknown = JSON.parse(body);
    const error = (parsed as { error?: unknown } | null)?.error as
      | { code?: unknown; message?: unknown; path?: unknown }
      | undefined;
    if (error && typeof error.code === "string") {
      code = error.code;
      detail = String(error.message ?? "");
      path = typeof error.path === "string" ? error.path : undefined;
    }
  } catch {
    // not JSON: keep the status's code and the body's start
  }
  const Class = byStatus[status] ?? (status >= 500 ? ServerError : ApiError);
  return new Class(status, code, detail, path, retryAfter);
}
