import ContextStack
import Foundation
import GRDB

/// The files and connections of the reading workloads: the data set, once per contender.
@MainActor class ReadingWorkload: WorkloadBase {
    var raw: RawDatabase!
    var pool: DatabasePool!
    var stack: Stack!
    var world: MainContext!

    func prepare() async throws {
        raw = try RawDatabase(path: try fixture.filledPlainFile("read-raw").path)
        pool = try fixture.pool(try fixture.filledPlainFile("read-grdb"))
        (stack, world) = try threeTier(try fixture.filledStoreFile("read-cs"))
    }

    func finish() async throws {
        raw = nil; pool = nil; world = nil; stack = nil
    }

    /// Raw's read of every row: each one stepped into a struct. Checked: N rows.
    func rawReadAll() throws -> Sample {
        let statement = try raw.prepare("SELECT \(Raw.columns) FROM \"Item\"")
        var items: [RawItem] = []
        let elapsed = try measure {
            while try statement.step() { items.append(Raw.item(statement)) }
            statement.reset()
        }
        try expect(items.count == n && items.last?.name.isEmpty == false)
        return Sample(seconds: elapsed)
    }

    /// GRDB's read of every row: records decoded in `pool.read`. Checked: N rows.
    func grdbReadAll() throws -> Sample {
        let pool = pool!
        var items: [GItem] = []
        let elapsed = try measure { items = try pool.read { db in try GItem.fetchAll(db) } }
        try expect(items.count == n && items.last?.name.isEmpty == false)
        return Sample(seconds: elapsed)
    }
}

/// fetch: every object with all attributes.
final class FetchWorkload: ReadingWorkload, Workload {
    let id = "fetch"
    let summary = "fetch N objects with all attributes"
    let target = "≤ 1.6 × raw and < GRDB"

    func run(_ contender: Contender) async throws -> Sample? {
        switch contender {
        case .raw:
            return try rawReadAll()
        case .grdb:
            return try grdbReadAll()
        case .contextStack:
            world.reset()
            var items: [Item] = []
            let elapsed = try measure { items = try world.fetchAll(Item.self) }
            try expect(items.count == n)
            return Sample(seconds: elapsed)
        }
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let grdb = result.median(.grdb), let cs = result.median(.contextStack) else {
            return Verdict(met: nil, note: "missing samples")
        }
        return Verdict(met: cs <= 1.6 * raw && cs < grdb, note: cs < grdb ? "faster than GRDB" : String(format: "GRDB is %.2f × raw", grdb / raw))
    }
}

/// snapshots: every object as a Sendable value, read off the caller's thread (an `async`
/// read, as a request handler does it). Raw steps the same rows into a struct on the calling
/// thread; GRDB decodes records in `pool.read`, its fastest idiomatic read.
final class SnapshotsWorkload: ReadingWorkload, Workload {
    let id = "snapshots"
    let summary = "N objects as Sendable values (await context.snapshots)"
    let target = "≤ 1.3 × raw, < GRDB"

    func run(_ contender: Contender) async throws -> Sample? {
        switch contender {
        case .raw:
            return try rawReadAll()
        case .grdb:
            return try grdbReadAll()
        case .contextStack:
            let start = now()
            let items = try await world.snapshots(Item.self)
            let elapsed = seconds(since: start)
            try expect(items.count == n && items.last?.name.isEmpty == false)
            return Sample(seconds: elapsed)
        }
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let grdb = result.median(.grdb), let cs = result.median(.contextStack) else {
            return Verdict(met: nil, note: "missing samples")
        }
        return Verdict(met: cs <= 1.3 * raw && cs < grdb,
                       note: String(format: "%.2f × raw; %@", cs / raw, cs < grdb ? "faster than GRDB" : String(format: "GRDB is %.2f × raw", grdb / raw)))
    }
}

/// filter: an indexed predicate, a sort and a limit of 100, 1,000 times.
final class FilterWorkload: ReadingWorkload, Workload {
    let id = "filter"
    let summary = "indexed predicate (N/500 rows) + sort + limit 100, 1,000 times"
    let target = "≤ 1.3 × raw"
    let queries = 1000

    func run(_ contender: Contender) async throws -> Sample? {
        var total = 0
        let elapsed: Double
        switch contender {
        case .raw:
            let statement = try raw.prepare("SELECT \(Raw.columns) FROM \"Item\" WHERE \"category\" = ? ORDER BY \"score\" LIMIT 100")
            elapsed = try measure {
                for query in 0..<queries {
                    statement.bind(1, query % 500)
                    var items: [RawItem] = []
                    while try statement.step() { items.append(Raw.item(statement)) }
                    statement.reset()
                    total += items.count
                }
            }
        case .grdb:
            let pool = pool!
            elapsed = try measure {
                for query in 0..<queries {
                    let items = try pool.read { db in
                        try GItem.filter(GItem.Columns.category == query % 500).order(GItem.Columns.score).limit(100).fetchAll(db)
                    }
                    total += items.count
                }
            }
        case .contextStack:
            world.reset()
            elapsed = try measure {
                for query in 0..<queries {
                    let items = try world.fetchAll(Item.self, %"category" == query % 500, orderBy: .ascending("score"), options: .limit(100))
                    total += items.count
                }
            }
        }
        try expect(total == queries * min(100, n / 500))
        return Sample(seconds: elapsed)
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let cs = result.median(.contextStack) else { return Verdict(met: nil, note: "missing samples") }
        return Verdict(met: cs <= 1.3 * raw, note: String(format: "%.1f µs per query", cs / Double(queries) * 1e6))
    }
}

/// aggregate: average of an attribute grouped by another, in SQL, 10 times.
final class AggregateWorkload: ReadingWorkload, Workload {
    let id = "aggregate"
    let summary = "query with groupBy and average (10 times)"
    let target = "≤ 1.1 × raw SQL"
    let queries = 10

    func run(_ contender: Contender) async throws -> Sample? {
        var groups: [(Int, Double)] = []
        let elapsed: Double
        switch contender {
        case .raw:
            let statement = try raw.prepare("SELECT \"category\", avg(\"price\") FROM \"Item\" GROUP BY \"category\"")
            elapsed = try measure {
                for _ in 0..<queries {
                    groups = []
                    while try statement.step() { groups.append((statement.int(0), statement.double(1))) }
                    statement.reset()
                }
            }
        case .grdb:
            let pool = pool!
            elapsed = try measure {
                for _ in 0..<queries {
                    groups = try pool.read { db in
                        try GItem.select(GItem.Columns.category, average(GItem.Columns.price))
                            .group(GItem.Columns.category)
                            .asRequest(of: GRDB.Row.self)
                            .fetchAll(db)
                            .map { (Int($0[0] as Int64), $0[1] as Double) }
                    }
                }
            }
        case .contextStack:
            elapsed = try measure {
                for _ in 0..<queries {
                    groups = try world.query(Item.self, .select("category") | .average("price", alias: "avgPrice"), groupBy: %"category")
                        .map { (Int($0["category"]?.int64Value ?? -1), $0["avgPrice"]?.doubleValue ?? .nan) }
                }
            }
        }
        try expect(groups.count == 500)
        return Sample(seconds: elapsed)
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let cs = result.median(.contextStack) else { return Verdict(met: nil, note: "missing samples") }
        return Verdict(met: cs <= 1.1 * raw, note: String(format: "%.1f ms per query", cs / Double(queries) * 1e3))
    }
}

/// lookup: 10,000 random objects by ID, not yet registered; then again, registered.
final class LookupWorkload: ReadingWorkload, Workload {
    let id = "lookup"
    let summary = "fetch(id:) of 10,000 random objects not yet registered"
    let target = "≤ 2 × raw; registered: no SQL"
    private var keys: [Int64] = []
    private var ids: [ObjectID] = []

    override func prepare() async throws {
        try await super.prepare()
        keys = randomKeys(10_000, seed: 3)
        let all = try world.fetchIDs(Item.self)
        ids = keys.map { all[Int($0) - 1] }
    }

    func run(_ contender: Contender) async throws -> Sample? {
        switch contender {
        case .raw:
            let statement = try raw.prepare("SELECT \(Raw.columns) FROM \"Item\" WHERE \"Z_PK\" = ?")
            var items: [RawItem] = []
            let elapsed = try measure {
                for key in keys {
                    statement.bind(1, key)
                    if try statement.step() { items.append(Raw.item(statement)) }
                    statement.reset()
                }
            }
            try expect(items.count == keys.count)
            return Sample(seconds: elapsed)
        case .grdb:
            let pool = pool!
            let keys = keys
            var items: [GItem] = []
            let elapsed = try measure {
                items = try pool.read { db in try keys.compactMap { try GItem.fetchOne(db, key: $0) } }
            }
            try expect(items.count == keys.count)
            return Sample(seconds: elapsed)
        case .contextStack:
            world.reset()
            var items: [Item] = []
            let elapsed = try measure {
                for id in ids { if let item = try world.fetch(Item.self, id: id) { items.append(item) } }
            }
            try expect(items.count == keys.count)
            // The same objects again, now registered (held by `items`): no SQL at all.
            var found = 0
            let registered = try measure {
                for id in ids where try world.fetch(Item.self, id: id) != nil { found += 1 }
            }
            try expect(found == keys.count)
            // Counted, not inferred from the time: the statements the registered pass ran.
            let statements = StatementCount()
            stack.trace { _ in statements.add() }
            for id in ids { _ = try world.fetch(Item.self, id: id) }
            stack.trace(nil)
            return Sample(seconds: elapsed, extra: ["registered": registered, "registeredStatements": Double(statements.value)])
        }
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let cs = result.median(.contextStack),
              let registered = result.median(.contextStack, extra: "registered") else { return Verdict(met: nil, note: "missing samples") }
        let perRegistered = registered / Double(keys.count)
        let statements = result.samples[.contextStack]?.compactMap { $0.extra["registeredStatements"] }.max() ?? .infinity
        return Verdict(met: cs <= 2 * raw && statements == 0,
                       note: String(format: "registered: %.2f µs per lookup, %.0f SQL statements (raw SQL %.1f µs)",
                                    perRegistered * 1e6, statements, raw / Double(keys.count) * 1e6))
    }
}

/// Statements counted from `stack.trace`, which calls from whichever thread runs them.
/// Protected by its lock.
final class StatementCount: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0

    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

struct UnexpectedResult: Error, CustomStringConvertible {
    let description: String
}

/// Checks that a contender did the whole job (a benchmark that silently did less would lie).
func expect(_ condition: Bool, _ message: String = "a contender returned an unexpected result", line: Int = #line) throws {
    if !condition { throw UnexpectedResult(description: "\(message) (line \(line))") }
}
