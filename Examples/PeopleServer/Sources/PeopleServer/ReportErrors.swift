import Hummingbird

/// Prints the errors that become 500 responses (anything but an `HTTPError`), so that a
/// failure in a handler is seen in the server's log, not only as a status.
struct ReportErrorsMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError {
            throw error
        } catch {
            print("PeopleServer: \(request.method) \(request.uri) failed: \(error)")
            throw error
        }
    }
}
