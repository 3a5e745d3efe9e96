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
stack.onError = { error in print("PeopleServer: a background save failed: \(error)") }

let router = Router()
router.middlewares.add(LogRequestsMiddleware(.debug))
router.middlewares.add(ReportErrorsMiddleware())
PeopleAPI(context: context).register(on: router)
LiveStream(stack: stack).register(on: router)

let app = Application(
    router: router,
    configuration: .init(address: .hostname(options.host, port: options.port), serverName: "PeopleServer \(options.name)"),
    onServerRunning: { _ in print("PeopleServer \(options.name) listening on http://\(options.host):\(options.port)") }
)
try await app.runService()
