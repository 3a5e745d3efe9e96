import ContextStack
import ContextStackPostgres
import Foundation

// History (Docs/History.md): how long another process's commit takes to show in a main
// context, and what recording history costs a write. ContextStack only: neither raw SQLite nor
// GRDB nor Fluent can see another process's commits.

/// The latency of remote commits: stack A commits (durably: `.persistentStore`, no root), and
/// stack B's three-tier main context holds the object A changes. Measured from A's `commit()`
/// returning until B's object shows the new value, for `commits` commits a repetition; the
/// sample is their median, with the 99th percentile beside it. Two stacks share nothing but
/// the store, as two processes would: B learns of A's commits from the history alone.
@MainActor final class RemoteLatency {
    let a: Stack
    let writer: Context
    let b: Stack
    let world: MainContext
    let probe: Item
    let id: ObjectID

    init(a: Stack, b: Stack) throws {
        self.a = a
        self.b = b
        writer = try Context(stack: a, updateTarget: .persistentStore)
        world = try MainContext(stack: b)
        guard let probe = try world.fetch(Item.self) else { throw UnexpectedResult(description: "no item to change") }
        self.probe = probe
        id = probe.objectID
    }

    /// The median and the 99th percentile of `commits` latencies, in seconds.
    func measure(commits: Int) async throws -> Sample {
        var latencies: [Double] = []
        for _ in 0..<commits {
            // At a random moment, as commits of another process arrive: not in step with the
            // watcher's polls.
            try await Task.sleep(for: .microseconds(Int.random(in: 0..<20_000)))
            let expected = probe.score + 1
            try writer.beginUpdateAndWait { update in
                guard let item = try update.fetch(Item.self, id: id) else { throw UnexpectedResult(description: "the item is gone") }
                item.score = expected
                try update.commit()
            }
            let start = now()
            while probe.score != expected {
                if seconds(since: start) > 30 { throw UnexpectedResult(description: "the other stack never saw the commit") }
                await Task.yield()
            }
            latencies.append(seconds(since: start))
        }
        latencies.sort()
        let p50 = latencies[latencies.count / 2]
        let p99 = latencies[min(latencies.count - 1, Int((Double(latencies.count) * 0.99).rounded(.up)) - 1)]
        return Sample(seconds: p50, extra: ["p50": p50, "p99": p99])
    }

    /// Met when the median p50 is at most `p50`, and the median p99 at most `p99` if given.
    static func verdict(_ result: WorkloadResult, p50 p50Target: Double, p99 p99Target: Double? = nil) -> Verdict {
        guard let p50 = result.median(.contextStack, extra: "p50"), let p99 = result.median(.contextStack, extra: "p99") else {
            return Verdict(met: nil, note: "missing samples")
        }
        return Verdict(met: p50 <= p50Target && p99 <= (p99Target ?? .infinity),
                       note: String(format: "p50 %.1f ms, p99 %.1f ms", p50 * 1000, p99 * 1000))
    }
}

/// history-latency on SQLite: stack B notices A's commits by polling `PRAGMA data_version`.
final class HistoryLatencyWorkload: WorkloadBase, Workload {
    let id = "history-latency"
    let summary = "another stack commits one change (durably); until this stack's main context shows it (SQLite)"
    let target = "p50 ≤ 25 ms, p99 ≤ 150 ms"
    private var latency: RemoteLatency?
    static let commits = 100

    func prepare() async throws {
        let url = try fixture.filledStoreFile("history-latency", count: 1_000)
        let a = try Stack(model: fixture.model, rootContext: .none)
        try a.addDatabaseStore(at: url, tracksHistory: true)
        let b = try Stack(model: fixture.model)
        try b.addDatabaseStore(at: url, tracksHistory: true)
        latency = try RemoteLatency(a: a, b: b)
    }

    func finish() async throws { latency = nil }

    func run(_ contender: Contender) async throws -> Sample? {
        guard contender == .contextStack, let latency else { return nil }
        return try await latency.measure(commits: Self.commits)
    }

    func verdict(_ result: WorkloadResult) -> Verdict { RemoteLatency.verdict(result, p50: 0.025, p99: 0.150) }
}

/// pg-history-latency: stack B's listener is rung by A's `NOTIFY`, then reads the history.
final class PostgresHistoryLatencyWorkload: Workload {
    let id = "pg-history-latency"
    let summary = "another stack commits one change (durably); until this stack's main context shows it (PostgreSQL)"
    let target = "p50 ≤ 10 ms"
    let repetitions: Int
    private let postgres: PostgresFixture
    private var latency: RemoteLatency?

    init(_ postgres: PostgresFixture, repetitions: Int) {
        self.postgres = postgres
        self.repetitions = repetitions
    }

    func prepare() async throws {
        try postgres.truncate()
        let (filler, world) = try postgres.csStack()
        try world.beginUpdateAndWait { update in
            for seed in postgres.fixture.seeds.prefix(1_000) { try update.create(Item.self).assign(seed) }
            try update.commit()
        }
        try await filler.flush()
        let a = try Stack(model: postgres.fixture.model, rootContext: .none)
        try a.addPostgresStore(url: postgres.csURL)
        let b = try Stack(model: postgres.fixture.model)
        try b.addPostgresStore(url: postgres.csURL)
        latency = try RemoteLatency(a: a, b: b)
    }

    func finish() async throws { latency = nil }

    func run(_ contender: Contender) async throws -> Sample? {
        guard contender == .contextStack, let latency else { return nil }
        return try await latency.measure(commits: HistoryLatencyWorkload.commits)
    }

    func verdict(_ result: WorkloadResult) -> Verdict { RemoteLatency.verdict(result, p50: 0.010) }
}

/// history-cost: ContextStack's insert (N objects, one commit, three-tier, flushed) and save1
/// (1,000 one-object commits to the store) with history on and off, interleaved in each
/// repetition (the order alternates). The sample is the insert with history; the ratios are
/// what history costs.
final class HistoryCostWorkload: WorkloadBase, Workload {
    let id = "history-cost"
    let summary = "insert and save1 with history on / off (SQLite)"
    let target = "history costs ≤ 20 % of insert throughput"
    private var round = 0

    func run(_ contender: Contender) async throws -> Sample? {
        guard contender == .contextStack else { return nil }
        round += 1
        var extra: [String: Double] = [:]
        for tracks in round.isMultiple(of: 2) ? [false, true] : [true, false] {
            let label = tracks ? "on" : "off"
            extra["insert.\(label)"] = try await insert(tracksHistory: tracks)
            extra["save1.\(label)"] = try saveOne(tracksHistory: tracks)
        }
        return Sample(seconds: extra["insert.on"]!, extra: extra)
    }

    private func insert(tracksHistory: Bool) async throws -> Double {
        let url = fixture.newURL("history-insert")
        defer { fixture.remove(url) }
        let stack = try Stack(model: fixture.model)
        try stack.addDatabaseStore(at: url, tracksHistory: tracksHistory)
        let world = try MainContext(stack: stack)
        let seeds = fixture.seeds
        let elapsed = try await CSWrites.timedInsert(seeds, world: world, stack: stack)
        try WrittenItems.check(WrittenItems.sqlite(url), count: seeds.count, "history-cost insert") { seeds[$0] }
        if tracksHistory, try stack.history(after: nil).first?.changes.count != seeds.count {
            throw UnexpectedResult(description: "history-cost: the history does not hold the insert")
        }
        return elapsed
    }

    static let commits = 1_000

    private func saveOne(tracksHistory: Bool) throws -> Double {
        let url = fixture.newURL("history-save1")
        defer { fixture.remove(url) }
        let stack = try Stack(model: fixture.model, rootContext: .none)
        try stack.addDatabaseStore(at: url, tracksHistory: tracksHistory)
        let writer = try Context(stack: stack, updateTarget: .persistentStore)
        let seeds = fixture.seeds
        let elapsed = try measure {
            for index in 0..<Self.commits {
                try writer.beginUpdateAndWait { update in
                    try update.create(Item.self).assign(seeds[index % seeds.count])
                    try update.commit()
                }
            }
        }
        if tracksHistory, try stack.history(after: nil).count != Self.commits {
            throw UnexpectedResult(description: "history-cost: the history does not hold every commit")
        }
        return elapsed
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let insertOn = result.median(.contextStack, extra: "insert.on"), let insertOff = result.median(.contextStack, extra: "insert.off"),
              let saveOn = result.median(.contextStack, extra: "save1.on"), let saveOff = result.median(.contextStack, extra: "save1.off") else {
            return Verdict(met: nil, note: "missing samples")
        }
        let insertCost = insertOn / insertOff - 1
        let perCommit = (saveOn - saveOff) / Double(Self.commits)
        return Verdict(met: insertCost <= 0.20,
                       note: String(format: "insert %+.0f %% with history; save1 %+.1f µs per commit (%.1f → %.1f µs)",
                                    insertCost * 100, perCommit * 1e6, saveOff / Double(Self.commits) * 1e6, saveOn / Double(Self.commits) * 1e6))
    }
}
