import Hummingbird

/// Logs the errors that become 500 responses (anything but an `HTTPError`), so that a failure
/// in a handler is seen in the server's log, not only as a status. Through the request's
/// logger, which writes to standard error at once: a `print` sits in standard output's buffer
/// when that is a file, and is lost if the server is stopped before the buffer fills.
struct ReportErrorsMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError {
            throw error
        } catch {
            context.logger.error("PeopleServer: \(request.method) \(request.uri) failed: \(error)")
            throw error
        }
    }
}
