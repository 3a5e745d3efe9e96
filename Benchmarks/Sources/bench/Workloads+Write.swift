import ContextStack
import Dispatch
import Foundation
import GRDB

/// What every workload keeps: the fixture and its repetition count.
@MainActor class WorkloadBase {
    let fixture: Fixture
    let repetitions: Int
    var n: Int { fixture.n }

    init(_ fixture: Fixture, repetitions: Int) {
        self.fixture = fixture
        self.repetitions = repetitions
    }

    /// A store with a three-tier main context (the default topology) on `url`.
    func threeTier(_ url: URL) throws -> (Stack, MainContext) {
        let stack = try Stack(model: fixture.model)
        try stack.addDatabaseStore(at: url)
        return (stack, try MainContext(stack: stack))
    }

    /// How many times each contender has run this workload (the warm-up included): what a
    /// write workload's result check expects to find applied.
    private var runs: [Contender: Int] = [:]

    /// Counts a run of `contender`; returns its number, from 1.
    func counted(_ contender: Contender) -> Int {
        runs[contender, default: 0] += 1
        return runs[contender]!
    }

    /// `count` distinct primary keys in 1...n, the same on every run.
    func randomKeys(_ count: Int, seed: UInt64) -> [Int64] {
        var generator = SplitMix(state: seed)
        var keys = Set<Int64>()
        var ordered: [Int64] = []
        while ordered.count < min(count, n) {
            let key = Int64.random(in: 1...Int64(n), using: &generator)
            if keys.insert(key).inserted { ordered.append(key) }
        }
        return ordered
    }
}

/// insert: N objects created in one update, committed, flushed.
final class InsertWorkload: WorkloadBase, Workload {
    let id = "insert"
    let summary = "create N objects in one update, commit, flush (three-tier)"
    let target = "≤ 2.5 × raw and < GRDB"

    func run(_ contender: Contender) async throws -> Sample? {
        let seeds = fixture.seeds
        let count = n
        switch contender {
        case .raw:
            let url = try fixture.emptyPlainFile("insert-raw")
            defer { fixture.remove(url) }
            let db = try RawDatabase(path: url.path)
            let elapsed = try measure { try Raw.insert(db, seeds: seeds, count: count) }
            try WrittenItems.check(WrittenItems.sqlite(url), count: count, "insert, raw") { seeds[$0] }
            return Sample(seconds: elapsed)
        case .grdb:
            let url = try fixture.emptyPlainFile("insert-grdb")
            defer { fixture.remove(url) }
            let pool = try fixture.pool(url)
            let elapsed = try measure {
                try pool.write { db in
                    for seed in seeds { try GItem(seed).insert(db) }
                }
            }
            try WrittenItems.check(WrittenItems.sqlite(url), count: count, "insert, GRDB") { seeds[$0] }
            return Sample(seconds: elapsed)
        case .contextStack:
            let url = fixture.newURL("insert-cs")
            defer { fixture.remove(url) }
            let (stack, world) = try threeTier(url)
            let start = now()
            try world.beginUpdateAndWait { update in
                for seed in seeds {
                    try update.create(Item.self).assign(seed)
                }
                try update.commit()
            }
            try await stack.flush()
            let elapsed = seconds(since: start)
            try WrittenItems.check(WrittenItems.sqlite(url), count: count, "insert, ContextStack") { seeds[$0] }
            return Sample(seconds: elapsed)
        }
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let grdb = result.median(.grdb), let cs = result.median(.contextStack) else {
            return Verdict(met: nil, note: "missing samples")
        }
        return Verdict(met: cs <= 2.5 * raw && cs < grdb, note: String(format: "%.0f k objects/s", Double(n) / cs / 1000))
    }
}

/// update: one attribute of 10 % of the objects changed in one update, committed, flushed.
final class UpdateWorkload: WorkloadBase, Workload {
    let id = "update"
    let summary = "change one attribute of 10 % of the objects, commit, flush"
    let target = "≤ 2 × raw UPDATE loop"
    private var raw: RawDatabase!
    private var pool: DatabasePool!
    private var stack: Stack!
    private var world: MainContext!
    private var files: [Contender: URL] = [:]

    func prepare() async throws {
        files = [.raw: try fixture.filledPlainFile("update-raw"), .grdb: try fixture.filledPlainFile("update-grdb"),
                 .contextStack: try fixture.filledStoreFile("update-cs")]
        raw = try RawDatabase(path: files[.raw]!.path)
        pool = try fixture.pool(files[.grdb]!)
        (stack, world) = try threeTier(files[.contextStack]!)
    }

    /// Every row with quantity < 100 has its score raised once per run so far; no other changed.
    private func checkResult(_ contender: Contender) throws {
        let runs = counted(contender)
        let seeds = fixture.seeds
        try WrittenItems.checkRaised(WrittenItems.sqlite(files[contender]!), seeds: seeds, runs: runs, "update, \(contender.label)") {
            seeds[$0].quantity < 100
        }
    }

    func finish() async throws {
        raw = nil; pool = nil; world = nil; stack = nil
    }

    func run(_ contender: Contender) async throws -> Sample? {
        switch contender {
        case .raw:
            let select = try raw.prepare("SELECT \"Z_PK\", \"score\" FROM \"Item\" WHERE \"quantity\" < 100")
            let update = try raw.prepare("UPDATE \"Item\" SET \"score\" = ? WHERE \"Z_PK\" = ?")
            let db = raw!
            let elapsed = try measure {
                try db.execute("BEGIN IMMEDIATE")
                var rows: [(Int64, Double)] = []
                while try select.step() { rows.append((select.int64(0), select.double(1))) }
                select.reset()
                for (key, score) in rows {
                    update.bind(1, score + 1)
                    update.bind(2, key)
                    try update.run()
                }
                try db.execute("COMMIT")
            }
            try checkResult(contender)
            return Sample(seconds: elapsed)
        case .grdb:
            let pool = pool!
            let elapsed = try measure {
                try pool.write { db in
                    for var item in try GItem.filter(GItem.Columns.quantity < 100).fetchAll(db) {
                        item.score += 1
                        try item.update(db, columns: [GItem.Columns.score])
                    }
                }
            }
            try checkResult(contender)
            return Sample(seconds: elapsed)
        case .contextStack:
            let start = now()
            try world.beginUpdateAndWait { update in
                for item in try update.fetchAll(Item.self, %"quantity" < 100) { item.score += 1 }
                try update.commit()
            }
            try await stack.flush()
            let elapsed = seconds(since: start)
            try checkResult(contender)
            return Sample(seconds: elapsed)
        }
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let cs = result.median(.contextStack) else { return Verdict(met: nil, note: "missing samples") }
        return Verdict(met: cs <= 2 * raw, note: String(format: "%.0f k updates/s", Double(n / 10) / cs / 1000))
    }
}

/// save1: 200 one-object updates, each committed durably (`.persistentStore`).
final class SaveOneWorkload: WorkloadBase, Workload {
    let id = "save1"
    let summary = "200 updates of one object, each committed durably (.persistentStore)"
    let target = "≤ raw + 10 µs per commit"
    let commits = 200
    private var raw: RawDatabase!
    private var pool: DatabasePool!
    private var stack: Stack!
    private var updater: ContextStack.Context!
    private var keys: [Int64] = []
    private var ids: [ObjectID] = []
    private var files: [Contender: URL] = [:]

    func prepare() async throws {
        keys = randomKeys(commits, seed: 7)
        files = [.raw: try fixture.filledPlainFile("save1-raw"), .grdb: try fixture.filledPlainFile("save1-grdb"),
                 .contextStack: try fixture.filledStoreFile("save1-cs")]
        raw = try RawDatabase(path: files[.raw]!.path)
        pool = try fixture.pool(files[.grdb]!)
        let (stack, world) = try threeTier(files[.contextStack]!)
        ids = try CSWrites.ids(world, keys: keys)
        self.stack = stack
        updater = try Context(stack: stack, updateTarget: .persistentStore)
    }

    func finish() async throws {
        raw = nil; pool = nil; updater = nil; stack = nil
    }

    func run(_ contender: Contender) async throws -> Sample? {
        switch contender {
        case .raw:
            let db = raw!
            let select = try db.prepare("SELECT \(Raw.columns) FROM \"Item\" WHERE \"Z_PK\" = ?")
            let update = try db.prepare("UPDATE \"Item\" SET \"score\" = ? WHERE \"Z_PK\" = ?")
            let elapsed = try measure {
                for key in keys { try Raw.readModifyWrite(db, select: select, update: update, key: key) }
            }
            try checkResult(contender)
            return Sample(seconds: elapsed)
        case .grdb:
            let pool = pool!
            let elapsed = try measure {
                for key in keys { try GRDBWrites.readModifyWrite(pool, key: key) }
            }
            try checkResult(contender)
            return Sample(seconds: elapsed)
        case .contextStack:
            let elapsed = try CSWrites.timedReadModifyWrites(updater, ids: ids)
            try checkResult(contender)
            return Sample(seconds: elapsed)
        }
    }

    /// The rows of `keys` have their score raised once per run so far; no other changed.
    private func checkResult(_ contender: Contender) throws {
        try WrittenItems.checkRaised(WrittenItems.sqlite(files[contender]!), seeds: fixture.seeds, runs: counted(contender),
                                     "save1, \(contender.label)", changed: WrittenItems.seedIndexes(keys).contains)
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        Verdict.perCommit(result, commits: commits, allowance: 10e-6)
    }
}

/// concurrent: 4 writers × 1,000 one-object commits, then flush.
final class ConcurrentWorkload: WorkloadBase, Workload {
    let id = "concurrent"
    let summary = "4 update contexts × 1,000 one-object commits, then flush (three-tier)"
    let target = "≥ 1.5 × raw one-transaction-per-commit throughput"
    let writers = 4
    /// 1,000, or fewer when the data set has fewer than 4,000 objects to spread them over
    /// (each commit changes an object of its own).
    var commitsPerWriter: Int { min(1000, n / writers) }
    private var raw: RawDatabase!
    private var pool: DatabasePool!
    private var stack: Stack!
    private var world: MainContext!
    private var keys: [[Int64]] = []
    private var ids: [[ObjectID]] = []
    private var files: [Contender: URL] = [:]

    func prepare() async throws {
        let all = randomKeys(writers * commitsPerWriter, seed: 11)
        keys = (0..<writers).map { writer in Array(all[(writer * commitsPerWriter)..<((writer + 1) * commitsPerWriter)]) }
        files = [.raw: try fixture.filledPlainFile("concurrent-raw"), .grdb: try fixture.filledPlainFile("concurrent-grdb"),
                 .contextStack: try fixture.filledStoreFile("concurrent-cs")]
        raw = try RawDatabase(path: files[.raw]!.path)
        pool = try fixture.pool(files[.grdb]!)
        (stack, world) = try threeTier(files[.contextStack]!)
        ids = try keys.map { try CSWrites.ids(world, keys: $0) }
    }

    /// The rows of every writer's keys have their score raised once per run so far.
    private func checkResult(_ contender: Contender) throws {
        try WrittenItems.checkRaised(WrittenItems.sqlite(files[contender]!), seeds: fixture.seeds, runs: counted(contender),
                                     "concurrent, \(contender.label)", changed: WrittenItems.seedIndexes(keys.flatMap { $0 }).contains)
    }

    func finish() async throws {
        raw = nil; pool = nil; world = nil; stack = nil
    }

    func run(_ contender: Contender) async throws -> Sample? {
        switch contender {
        case .raw:
            // The limit for one-transaction-per-commit: one connection, commits back to back.
            let db = raw!
            let select = try db.prepare("SELECT \(Raw.columns) FROM \"Item\" WHERE \"Z_PK\" = ?")
            let update = try db.prepare("UPDATE \"Item\" SET \"score\" = ? WHERE \"Z_PK\" = ?")
            let keys = keys.flatMap { $0 }
            let elapsed = try measure {
                for key in keys { try Raw.readModifyWrite(db, select: select, update: update, key: key) }
            }
            try checkResult(contender)
            return Sample(seconds: elapsed)
        case .grdb:
            let pool = pool!
            let keys = keys
            let failures = FailureBox()
            let elapsed = measure {
                DispatchQueue.concurrentPerform(iterations: writers) { writer in
                    do {
                        for key in keys[writer] { try GRDBWrites.readModifyWrite(pool, key: key) }
                    } catch {
                        failures.record(error)
                    }
                }
            }
            try failures.check()
            try checkResult(contender)
            return Sample(seconds: elapsed)
        case .contextStack:
            let world = world!
            let ids = ids
            let failures = FailureBox()
            let start = now()
            DispatchQueue.concurrentPerform(iterations: writers) { writer in
                do {
                    for id in ids[writer] { try CSWrites.readModifyWrite(world, id: id) }
                } catch {
                    failures.record(error)
                }
            }
            try failures.check()
            try await stack.flush()
            let elapsed = seconds(since: start)
            try checkResult(contender)
            return Sample(seconds: elapsed)
        }
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let cs = result.median(.contextStack) else { return Verdict(met: nil, note: "missing samples") }
        let total = Double(writers * commitsPerWriter)
        return Verdict(met: cs * 1.5 <= raw, note: String(format: "%.0f commits/s (raw %.0f)", total / cs, total / raw))
    }
}

/// The first error of concurrent workers. Protected by its lock.
final class FailureBox: @unchecked Sendable {
    private let lock = NSLock()
    private var first: (any Error)?

    func record(_ error: any Error) {
        lock.withLock { if first == nil { first = error } }
    }

    func check() throws {
        if let error = lock.withLock({ first }) { throw error }
    }
}

extension Raw {
    /// One durable read-modify-write of one row, in its own write transaction.
    static func readModifyWrite(_ db: RawDatabase, select: RawStatement, update: RawStatement, key: Int64) throws {
        try db.execute("BEGIN IMMEDIATE")
        select.bind(1, key)
        guard try select.step() else { throw RawError(code: 0, message: "no row \(key)") }
        let item = Raw.item(select)
        select.reset()
        update.bind(1, item.score + 1)
        update.bind(2, key)
        try update.run()
        try db.execute("COMMIT")
    }
}

enum GRDBWrites {
    static func readModifyWrite(_ pool: DatabasePool, key: Int64) throws {
        try pool.write { db in
            guard var item = try GItem.fetchOne(db, key: key) else { throw RawError(code: 0, message: "no row \(key)") }
            item.score += 1
            try item.update(db, columns: [GItem.Columns.score])
        }
    }
}

enum CSWrites {
    struct Missing: Error {}

    /// The IDs of the objects with primary keys `keys` (filled stores hold seed `i` at key
    /// `i + 1`, as the raw and GRDB files do).
    @MainActor static func ids(_ world: MainContext, keys: [Int64]) throws -> [ObjectID] {
        let all = try world.fetchIDs(Item.self, orderBy: .ascending("rank"))
        let ids = keys.map { all[Int($0) - 1] }
        guard ids.map(\.primaryKey) == keys else { throw BenchError("ContextStack store: keys are not the filled ones") }
        return ids
    }

    /// The seconds it takes to insert `seeds` in one update of `world` and to have them stored
    /// (`flush`): the insert workloads' measure, on every store.
    @MainActor static func timedInsert(_ seeds: [RawItem], world: MainContext, stack: Stack) async throws -> Double {
        let start = now()
        try world.beginUpdateAndWait { update in
            for seed in seeds { try update.create(Item.self).assign(seed) }
            try update.commit()
        }
        try await stack.flush()
        return seconds(since: start)
    }

    /// The seconds `readModifyWrite` takes for every ID in turn, each its own durable commit.
    static func timedReadModifyWrites(_ context: ContextStack.Context, ids: [ObjectID]) throws -> Double {
        try measure {
            for id in ids { try readModifyWrite(context, id: id) }
        }
    }

    static func readModifyWrite(_ context: ContextStack.Context, id: ObjectID) throws {
        try context.beginUpdateAndWait { update in
            guard let item = try update.fetch(Item.self, id: id) else { throw Missing() }
            item.score += 1
            try update.commit()
        }
    }

    static func readModifyWrite(_ world: MainContext, id: ObjectID) throws {
        try world.beginUpdateAndWait { update in
            guard let item = try update.fetch(Item.self, id: id) else { throw Missing() }
            item.score += 1
            try update.commit()
        }
    }
}
