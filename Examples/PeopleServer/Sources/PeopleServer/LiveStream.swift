import ContextStack
import Foundation
import Hummingbird
import ServiceLifecycle

/// `GET /live`: every commit to the store as a server-sent event — this server's own and,
/// through the store's history, those of every other server on the same store:
///
///     event: commit
///     data: {"author":"A","deleted":[],"inserted":["Person/7"],"remote":true,"updated":[]}
struct LiveStream: Sendable {
    let stack: Stack

    struct Event: Encodable {
        let remote: Bool
        let author: String?
        let inserted: [String]
        let updated: [String]
        let deleted: [String]
    }

    func register(on router: Router<APIContext>) {
        router.get("live") { _, _ -> Response in
            // Subscribed before the response starts, so no commit after the request is missed.
            let commits = stack.allCommits
            return Response(status: .ok, headers: [.contentType: "text/event-stream", .cacheControl: "no-cache"],
                            body: ResponseBody { writer in
                                try await writer.write(ByteBuffer(string: ": connected\n\n"))
                                let encoder = APIContext.encoder()
                                // Ends when the server shuts down gracefully (SIGTERM): an open
                                // stream would otherwise keep it from stopping.
                                for await commit in commits.cancelOnGracefulShutdown() {
                                    let event = Event(remote: commit.isRemote, author: commit.author,
                                                      inserted: commit.inserted.map(\.description),
                                                      updated: commit.updated.map(\.description),
                                                      deleted: commit.deleted.map(\.description))
                                    let data = try encoder.encode(event)
                                    try await writer.write(ByteBuffer(string: "event: commit\ndata: \(String(decoding: data, as: UTF8.self))\n\n"))
                                }
                                try await writer.finish(nil)
                            })
        }
    }
}
