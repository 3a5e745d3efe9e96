import ContextStack
import Foundation
import GRDB

/// server: what an async request handler does — 64 concurrent tasks on Swift's cooperative
/// pool, each doing read-modify-write transactions of one object (its own objects: no
/// conflicts), 10,000 in all; each transaction durable when it returns. ContextStack: a
/// `Context` whose updates go straight to the store (as Examples/PeopleServer), `await
/// context.transaction`. GRDB: a `DatabasePool`, `await pool.write`. Raw: the same 10,000
/// one-transaction commits back to back on one connection, the serial limit. Checked: every
/// object's score raised once per run.
final class ServerWorkload: WorkloadBase, Workload {
    let id = "server"
    let summary = "64 tasks × read-modify-write transactions, 10,000 in all (async)"
    let target = "> GRDB's throughput"
    let tasks = 64
    var total: Int { min(10_000, n) }
    private var raw: RawDatabase!
    private var pool: DatabasePool!
    private var stack: Stack!
    private var context: ContextStack.Context!
    private var keys: [[Int64]] = []
    private var ids: [[ObjectID]] = []
    private var files: [Contender: URL] = [:]

    func prepare() async throws {
        let all = randomKeys(total, seed: 23)
        keys = (0..<tasks).map { task in stride(from: task, to: all.count, by: tasks).map { all[$0] } }
        files = [.raw: try fixture.filledPlainFile("server-raw"), .grdb: try fixture.filledPlainFile("server-grdb"),
                 .contextStack: try fixture.filledStoreFile("server-cs")]
        raw = try RawDatabase(path: files[.raw]!.path)
        pool = try fixture.pool(files[.grdb]!)
        let world: MainContext
        (stack, world) = try threeTier(files[.contextStack]!)
        ids = try keys.map { try CSWrites.ids(world, keys: $0) }
        context = try ContextStack.Context(stack: stack, updateTarget: .persistentStore)
    }

    func finish() async throws {
        raw = nil; pool = nil; context = nil; stack = nil
    }

    private func checkResult(_ contender: Contender) throws {
        try WrittenItems.checkRaised(WrittenItems.sqlite(files[contender]!), seeds: fixture.seeds, runs: counted(contender),
                                     "server, \(contender.label)", changed: WrittenItems.seedIndexes(keys.flatMap { $0 }).contains)
    }

    func run(_ contender: Contender) async throws -> Sample? {
        let start = now()
        switch contender {
        case .raw:
            let db = raw!
            let select = try db.prepare("SELECT \(Raw.columns) FROM \"Item\" WHERE \"Z_PK\" = ?")
            let update = try db.prepare("UPDATE \"Item\" SET \"score\" = ? WHERE \"Z_PK\" = ?")
            for key in keys.flatMap({ $0 }) { try Raw.readModifyWrite(db, select: select, update: update, key: key) }
        case .grdb:
            let pool = pool!
            try await withThrowingTaskGroup(of: Void.self) { group in
                for keys in keys {
                    group.addTask {
                        for key in keys {
                            try await pool.write { db in
                                guard var item = try GItem.fetchOne(db, key: key) else { throw BenchError("no row \(key)") }
                                item.score += 1
                                try item.update(db, columns: [GItem.Columns.score])
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
        case .contextStack:
            let context = context!
            try await withThrowingTaskGroup(of: Void.self) { group in
                for ids in ids {
                    group.addTask {
                        for id in ids {
                            try await context.transaction { update in
                                guard let item = try update.fetch(Item.self, id: id) else { throw CSWrites.Missing() }
                                item.score += 1
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        let elapsed = seconds(since: start)
        try checkResult(contender)
        return Sample(seconds: elapsed)
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let grdb = result.median(.grdb), let cs = result.median(.contextStack), let raw = result.median(.raw) else {
            return Verdict(met: nil, note: "missing samples")
        }
        let total = Double(total)
        return Verdict(met: cs < grdb, note: String(format: "%.0f transactions/s (GRDB %.0f, raw serial %.0f)", total / cs, total / grdb, total / raw))
    }
}
