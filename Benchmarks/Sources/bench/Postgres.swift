import BenchPQ
import ContextStack
import ContextStackPostgres
import Foundation

// The PostgreSQL workloads (`--postgres URL`): raw libpq, the limit, and Fluent, the peer (in
// the column the SQLite workloads give GRDB), against ContextStack's PostgreSQL store, on the
// same `Item` rows. Each contender works in a schema of its own (`bench_raw`, `bench_fluent`,
// `bench_cs`) of the database the URL names, created afresh for the run and dropped after it.

/// A libpq connection used the way a careful developer uses it: prepared statements, text
/// parameters, pipelined where a loop of statements would otherwise wait for each answer.
final class RawPQ {
    let handle: OpaquePointer

    init(_ url: String, schema: String) throws {
        guard let handle = PQconnectdb(url), PQstatus(handle) == CONNECTION_OK else {
            throw BenchError("raw libpq: cannot connect")
        }
        self.handle = handle
        try execute("SET search_path = \(schema)")
    }

    deinit { PQfinish(handle) }

    func execute(_ sql: String) throws {
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            throw BenchError("raw libpq: \(String(cString: PQerrorMessage(handle)))")
        }
    }

    func prepare(_ name: String, _ sql: String) throws {
        let result = PQprepare(handle, name, sql, 0, nil)
        defer { PQclear(result) }
        guard PQresultStatus(result) == PGRES_COMMAND_OK else { throw BenchError("raw libpq: \(String(cString: PQerrorMessage(handle)))") }
    }

    /// Runs a prepared statement with text parameters; hands the result to `body`.
    func run<T>(_ name: String, _ parameters: [String?], _ body: (OpaquePointer) throws -> T) throws -> T {
        let copies = parameters.map { $0.map { strdup($0) } ?? nil }
        defer { copies.forEach { free($0) } }
        var pointers = copies.map { UnsafePointer($0) }
        let result = PQexecPrepared(handle, name, Int32(parameters.count), &pointers, nil, nil, 0)
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK, let result else {
            throw BenchError("raw libpq: \(String(cString: PQerrorMessage(handle)))")
        }
        return try body(result)
    }

    /// Sends a prepared statement in pipeline mode without waiting for its answer.
    func send(_ name: String, _ parameters: [String?]) throws {
        let copies = parameters.map { $0.map { strdup($0) } ?? nil }
        defer { copies.forEach { free($0) } }
        var pointers = copies.map { UnsafePointer($0) }
        guard PQsendQueryPrepared(handle, name, Int32(parameters.count), &pointers, nil, nil, 0) == 1 else {
            throw BenchError("raw libpq: \(String(cString: PQerrorMessage(handle)))")
        }
    }

    /// Runs `body` (which sends statements) in pipeline mode, then reads every answer.
    func pipelined(_ count: Int, _ body: () throws -> Void) throws {
        guard PQenterPipelineMode(handle) == 1 else { throw BenchError("raw libpq: no pipeline mode") }
        try body()
        guard PQpipelineSync(handle) == 1 else { throw BenchError("raw libpq: sync failed") }
        var answered = 0
        while true {
            guard let result = PQgetResult(handle) else { continue }
            let status = PQresultStatus(result)
            PQclear(result)
            if status == PGRES_PIPELINE_SYNC { break }
            guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
                throw BenchError("raw libpq: \(String(cString: PQerrorMessage(handle)))")
            }
            answered += 1
        }
        guard PQexitPipelineMode(handle) == 1, answered == count else { throw BenchError("raw libpq: \(answered) answers for \(count)") }
    }

    /// The first column of the first row, as text.
    func scalar(_ sql: String) throws -> String {
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        guard PQresultStatus(result) == PGRES_TUPLES_OK, PQntuples(result) > 0 else { throw BenchError("raw libpq: \(sql)") }
        return String(cString: PQgetvalue(result, 0, 0))
    }

    static func parameters(_ seed: RawItem, id: Int64) -> [String?] {
        [String(id), String(seed.category), String(seed.quantity), String(seed.rank), "\(seed.price)", "\(seed.score)",
         "\(seed.weight)", seed.name, seed.code, seed.note]
    }

    /// Row `row` of a result selecting `Raw.columns`, read as a careful developer reads text
    /// results: straight from libpq's buffers.
    @inline(__always) static func item(_ result: OpaquePointer, _ row: Int32) -> RawItem {
        func int(_ column: Int32) -> Int { strtol(PQgetvalue(result, row, column), nil, 10) }
        func double(_ column: Int32) -> Double { strtod(PQgetvalue(result, row, column), nil) }
        func text(_ column: Int32) -> String { String(cString: PQgetvalue(result, row, column)) }
        return RawItem(id: Int64(int(0)), category: int(1), quantity: int(2), rank: int(3), price: double(4), score: double(5),
                       weight: double(6), name: text(7), code: text(8), note: PQgetisnull(result, row, 9) == 1 ? nil : text(9))
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The PostgreSQL side of the fixture: the server, and the two schemas.
@MainActor final class PostgresFixture {
    let url: String
    let fixture: Fixture
    var n: Int { fixture.n }

    init(url: String, fixture: Fixture) throws {
        self.url = url
        self.fixture = fixture
        let admin = try RawPQ(url, schema: "public")
        for schema in Self.schemas {
            try admin.execute("DROP SCHEMA IF EXISTS \(schema) CASCADE; CREATE SCHEMA \(schema)")
        }
        // ContextStack creates the table in its schema; the others get the same one.
        _ = try csStack()
        try admin.execute("CREATE TABLE bench_raw.\"Item\" (LIKE bench_cs.\"Item\" INCLUDING ALL)")
        try admin.execute("CREATE TABLE bench_fluent.\"Item\" (LIKE bench_cs.\"Item\" INCLUDING ALL)")
        fluent = try FluentPeer(url: url)
    }

    static let schemas = ["bench_raw", "bench_fluent", "bench_cs"]
    private(set) var fluent: FluentPeer!

    func removeAll() async {
        await fluent?.shutdown()
        fluent = nil
        if let admin = try? RawPQ(url, schema: "public") {
            try? admin.execute(Self.schemas.map { "DROP SCHEMA IF EXISTS \($0) CASCADE" }.joined(separator: "; "))
        }
    }

    /// The URL of the ContextStack schema.
    var csURL: URL {
        var parts = URLComponents(string: url)!
        parts.queryItems = (parts.queryItems ?? []) + [URLQueryItem(name: "options", value: "-csearch_path=bench_cs")]
        return parts.url!
    }

    /// A three-tier stack on the ContextStack schema.
    func csStack() throws -> (Stack, MainContext) {
        let stack = try Stack(model: fixture.model)
        try stack.addPostgresStore(url: csURL, tracksHistory: ProcessInfo.processInfo.environment["BENCH_NO_HISTORY"] == nil)
        return (stack, try MainContext(stack: stack))
    }

    func raw() throws -> RawPQ { try RawPQ(url, schema: "bench_raw") }

    /// Empties every contender's table.
    func truncate() throws {
        try raw().execute(Self.schemas.map { "TRUNCATE \($0).\"Item\"" }.joined(separator: "; "))
    }

    /// Fills every table with the data set, with the same keys (raw, pipelined, one transaction).
    func fill() throws {
        try truncate()
        for schema in Self.schemas {
            let db = try RawPQ(url, schema: schema)
            try PGRaw.insert(db, seeds: fixture.seeds)
        }
        // Keys ContextStack hands out next must not collide with the filled ones.
        try RawPQ(url, schema: "bench_cs").execute("SELECT setval('\"Z_KEYS_Item\"', \(n + 1))")
    }

    /// Throws unless a table holds exactly the data set, every column of every row.
    func check(_ schema: String) throws {
        let seeds = fixture.seeds
        try WrittenItems.check(WrittenItems.postgres(url, schema: schema), count: n, schema) { seeds[$0] }
    }

    /// Throws unless the rows of `keys` (seed `key - 1` each) have their score raised `runs`
    /// times and every other row is as filled.
    func checkReadModifyWrites(_ schema: String, keys: [Int64], runs: Int) throws {
        try WrittenItems.checkRaised(WrittenItems.postgres(url, schema: schema), seeds: fixture.seeds, runs: runs, schema,
                                     changed: WrittenItems.seedIndexes(keys).contains)
    }
}

enum PGRaw {
    static let insertSQL = "INSERT INTO \"Item\" (\(Raw.columns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"

    /// Every seed in one transaction, the inserts pipelined.
    static func insert(_ db: RawPQ, seeds: [RawItem]) throws {
        try db.prepare("insert", insertSQL)
        try db.execute("BEGIN")
        try db.pipelined(seeds.count) {
            for (index, seed) in seeds.enumerated() { try db.send("insert", RawPQ.parameters(seed, id: Int64(index + 1))) }
        }
        try db.execute("COMMIT")
    }
}

/// pg-insert: N objects created in one update, committed, flushed — on PostgreSQL.
final class PostgresInsertWorkload: WorkloadBase, Workload {
    let id = "pg-insert"
    let summary = "PostgreSQL: create N objects in one update, commit, flush (three-tier)"
    let target = "≤ 2 × raw libpq (pipelined)"
    let postgres: PostgresFixture

    init(_ postgres: PostgresFixture, repetitions: Int) {
        self.postgres = postgres
        super.init(postgres.fixture, repetitions: repetitions)
    }

    func run(_ contender: Contender) async throws -> Sample? {
        let seeds = fixture.seeds
        switch contender {
        case .raw:
            try postgres.truncate()
            let db = try postgres.raw()
            let elapsed = try measure { try PGRaw.insert(db, seeds: seeds) }
            try postgres.check("bench_raw")
            return Sample(seconds: elapsed)
        case .grdb:
            try postgres.truncate()
            let fluent = postgres.fluent!
            let start = now()
            try await fluent.insert(seeds)
            let elapsed = seconds(since: start)
            try postgres.check("bench_fluent")
            return Sample(seconds: elapsed)
        case .contextStack:
            try postgres.truncate()
            let (stack, world) = try postgres.csStack()
            let elapsed = try await CSWrites.timedInsert(seeds, world: world, stack: stack)
            try postgres.check("bench_cs")
            return Sample(seconds: elapsed)
        }
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let fluent = result.median(.grdb), let cs = result.median(.contextStack) else {
            return Verdict(met: nil, note: "missing samples")
        }
        return Verdict(met: cs <= 2 * raw && cs < fluent, note: String(format: "%.0f k objects/s; Fluent %.2f × raw", Double(n) / cs / 1000, fluent / raw))
    }
}

/// pg-fetch: N objects with all attributes, on PostgreSQL.
final class PostgresFetchWorkload: WorkloadBase, Workload {
    let id = "pg-fetch"
    let summary = "PostgreSQL: fetch N objects with all attributes"
    let target = "≤ 1.5 × raw libpq"
    let postgres: PostgresFixture
    private var raw: RawPQ!
    private var stack: Stack!
    private var world: MainContext!

    init(_ postgres: PostgresFixture, repetitions: Int) {
        self.postgres = postgres
        super.init(postgres.fixture, repetitions: repetitions)
    }

    func prepare() async throws {
        try postgres.fill()
        raw = try postgres.raw()
        try raw.prepare("all", "SELECT \(Raw.columns) FROM \"Item\"")
        (stack, world) = try postgres.csStack()
    }

    func finish() async throws {
        raw = nil; world = nil; stack = nil
    }

    func run(_ contender: Contender) async throws -> Sample? {
        switch contender {
        case .raw:
            var items: [RawItem] = []
            let elapsed = try measure {
                items = try raw.run("all", []) { result in
                    let count = PQntuples(result)
                    var items: [RawItem] = []
                    items.reserveCapacity(Int(count))
                    for row in 0..<count { items.append(RawPQ.item(result, row)) }
                    return items
                }
            }
            try expect(items.count == n && items.contains { $0.name == "item-\(n - 1)" && $0.rank == n - 1 })
            return Sample(seconds: elapsed)
        case .grdb:
            let fluent = postgres.fluent!
            var items: [FluentItem] = []
            let start = now()
            items = try await fluent.fetchAll()
            let elapsed = seconds(since: start)
            try expect(items.count == n && items.contains { $0.name == "item-\(n - 1)" && $0.rank == n - 1 })
            return Sample(seconds: elapsed)
        case .contextStack:
            world.reset()
            var items: [Item] = []
            let elapsed = try measure { items = try world.fetchAll(Item.self) }
            try expect(items.count == n && items.contains { $0.name == "item-\(n - 1)" && $0.rank == n - 1 })
            return Sample(seconds: elapsed)
        }
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let fluent = result.median(.grdb), let cs = result.median(.contextStack) else {
            return Verdict(met: nil, note: "missing samples")
        }
        return Verdict(met: cs <= 1.5 * raw && cs < fluent, note: String(format: "Fluent %.2f × raw", fluent / raw))
    }
}

/// pg-save1: 200 read-modify-write commits of one object each, durable when they return.
final class PostgresSaveOneWorkload: WorkloadBase, Workload {
    let id = "pg-save1"
    let summary = "PostgreSQL: 200 updates of one object, each committed durably (.persistentStore)"
    let target = "≤ raw libpq + 100 µs per commit"
    let commits = 200
    let postgres: PostgresFixture
    private var raw: RawPQ!
    private var stack: Stack!
    private var updater: ContextStack.Context!
    private var keys: [Int64] = []
    private var ids: [ObjectID] = []

    init(_ postgres: PostgresFixture, repetitions: Int) {
        self.postgres = postgres
        super.init(postgres.fixture, repetitions: repetitions)
    }

    func prepare() async throws {
        try postgres.fill()
        keys = randomKeys(commits, seed: 7)
        raw = try postgres.raw()
        try raw.prepare("one", "SELECT \(Raw.columns) FROM \"Item\" WHERE \"Z_PK\" = $1")
        try raw.prepare("set", "UPDATE \"Item\" SET \"score\" = $1 WHERE \"Z_PK\" = $2")
        let (stack, world) = try postgres.csStack()
        ids = try CSWrites.ids(world, keys: keys)
        self.stack = stack
        updater = try Context(stack: stack, updateTarget: .persistentStore)
    }

    func finish() async throws {
        raw = nil; updater = nil; stack = nil
    }

    func run(_ contender: Contender) async throws -> Sample? {
        switch contender {
        case .raw:
            let db = raw!
            let elapsed = try measure {
                for key in keys {
                    let item = try db.run("one", [String(key)]) { RawPQ.item($0, 0) }
                    try db.run("set", ["\(item.score + 1)", String(key)]) { _ in }
                }
            }
            try postgres.checkReadModifyWrites("bench_raw", keys: keys, runs: counted(contender))
            return Sample(seconds: elapsed)
        case .grdb:
            let fluent = postgres.fluent!
            let start = now()
            for key in keys { try await fluent.readModifyWrite(key: key) }
            let elapsed = seconds(since: start)
            try postgres.checkReadModifyWrites("bench_fluent", keys: keys, runs: counted(contender))
            return Sample(seconds: elapsed)
        case .contextStack:
            let elapsed = try CSWrites.timedReadModifyWrites(updater, ids: ids)
            try postgres.checkReadModifyWrites("bench_cs", keys: keys, runs: counted(contender))
            return Sample(seconds: elapsed)
        }
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        Verdict.perCommit(result, commits: commits, allowance: 100e-6)
    }
}
