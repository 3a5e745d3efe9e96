import ContextStack
import ContextStackPostgres
import Foundation
import Hummingbird

// One stack per process. Two of these servers on one SQLite file (or one PostgreSQL database)
// see each other's commits through the store's history: the live stream shows them.
let options = Options.parse(CommandLine.arguments)
let stack = try Stack(model: Model(Person.self, Pet.self))
if let url = options.postgresURL {
    try stack.addPostgresStore(url: url)                        // history is on by default
} else {
    try stack.addDatabaseStore(at: URL(fileURLWithPath: options.store), tracksHistory: true)
}
// Request handlers read and write through one Context: reads are async snapshots served by
// the store's reader pool; writes are transactions that are durable when they return.
let context = try Context(stack: stack, updateTarget: .persistentStore, author: options.name)
// Standard error, unbuffered: a line buffered in standard output is lost when the server is stopped.
stack.onError = { error in FileHandle.standardError.write(Data("PeopleServer: a background save failed: \(error)\n".utf8)) }

// Start following other processes' commits now, off the request path: the first `allCommits`
// reads the newest history transaction on the calling thread (Docs/Servers.md, "Several
// processes and machines").
_ = stack.allCommits

let router = Router(context: APIContext.self)
router.middlewares.add(LogRequestsMiddleware(.debug))
router.middlewares.add(ReportErrorsMiddleware())
PeopleAPI(context: context).register(on: router)
LiveStream(stack: stack).register(on: router)

let app = Application(
    router: router,
    configuration: .init(address: .hostname(options.host, port: options.port), serverName: "PeopleServer \(options.name)"),
    onServerRunning: { _ in
        FileHandle.standardError.write(Data("PeopleServer \(options.name) listening on http://\(options.host):\(options.port)\n".utf8))
    }
)
try await app.runService()
