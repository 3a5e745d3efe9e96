import ContextStack
import Foundation
import GRDB

/// merge: 100,000 objects registered in a main context; an update commits a change to 10,000
/// of them. Measured from the commit until the main context's objects show it, and until the
/// commit is in SQLite, in the three-tier and the auto-merge topologies.
final class MergeWorkload: WorkloadBase, Workload {
    let id = "merge"
    let summary = "N objects registered in the main context, a commit touching 10 %: until the main context sees it"
    let target = "≤ 3 × the commit's save time"

    private struct Topology {
        let name: String
        let stack: Stack
        let world: MainContext
        var registered: [Item]
        /// A registered object the commit changes, and the value that shows the change.
        var probe: Item
    }

    private var topologies: [Topology] = []

    func prepare() async throws {
        for (name, target) in [("threeTier", UpdateTarget.mainContext), ("autoMerge", .rootContext(autoMerge: true))] {
            let stack = try Stack(model: fixture.model)
            try stack.addDatabaseStore(at: try fixture.filledStoreFile("merge-\(name)"))
            let world = try MainContext(stack: stack, updateTarget: target)
            let registered = try world.fetchAll(Item.self)
            guard let probe = registered.first(where: { $0.quantity < 100 }) else { throw UnexpectedResult(description: "no probe") }
            topologies.append(Topology(name: name, stack: stack, world: world, registered: registered, probe: probe))
        }
    }

    func finish() async throws {
        topologies = []
    }

    func run(_ contender: Contender) async throws -> Sample? {
        guard contender == .contextStack else { return nil }
        var extra: [String: Double] = [:]
        for topology in topologies {
            let (visible, saved) = try await measure(topology)
            extra["\(topology.name).visible"] = visible
            extra["\(topology.name).save"] = saved
        }
        return Sample(seconds: extra["threeTier.visible"]!, extra: extra)
    }

    /// Seconds from the commit until the main context shows it, and until it is in SQLite.
    private func measure(_ topology: Topology) async throws -> (visible: Double, saved: Double) {
        let expected = topology.probe.score + 1
        let start = try topology.world.beginUpdateAndWait { update -> UInt64 in
            for item in try update.fetchAll(Item.self, %"quantity" < 100) { item.score += 1 }
            let start = now()
            try update.commit()
            return start
        }
        let stack = topology.stack
        let durable = Task.detached { () throws -> UInt64 in
            try await stack.flush()
            return now()
        }
        // The main context applies handed-over commits on its next turn of the main actor.
        while topology.probe.score != expected {
            if seconds(since: start) > 60 { throw UnexpectedResult(description: "\(topology.name): the main context never saw the commit") }
            await Task.yield()
        }
        let visible = seconds(since: start)
        let saved = Double(try await durable.value - start) / 1e9
        return (visible, saved)
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        var met = true
        var notes: [String] = []
        for name in ["threeTier", "autoMerge"] {
            guard let visible = result.median(.contextStack, extra: "\(name).visible"),
                  let saved = result.median(.contextStack, extra: "\(name).save") else { return Verdict(met: nil, note: "missing samples") }
            met = met && visible <= 3 * saved
            notes.append("\(name): seen \(Table.time(visible)), saved \(Table.time(saved))")
        }
        return Verdict(met: met, note: notes.joined(separator: "; "))
    }
}

/// live: a FetchedResults of N rows; a commit moves 10 of them. Measured from the commit until
/// the results report the change, against a full refetch of the same objects in the same order.
///
/// Every repetition moves 10 objects picked at random to random places in the middle half of
/// the order (a new `rank` there), so each move costs what it costs in the middle of the
/// results' arrays; the results' order is checked after each.
final class LiveWorkload: WorkloadBase, Workload {
    let id = "live"
    let summary = "FetchedResults of N rows, a commit moving 10 to random places: until the results report it"
    let target = "≤ 1 % of a full refetch"
    let touched = 10

    private final class Flag {
        var changes = 0
    }

    private var stack: Stack!
    private var world: MainContext!
    private var results: FetchedResults<Item>!
    private let flag = Flag()
    private var all: [ObjectID] = []
    /// Which objects move where, a new choice at every repetition (the same sequence every run).
    private var generator = SplitMix(state: 5)

    func prepare() async throws {
        (stack, world) = try threeTier(try fixture.filledStoreFile("live-cs"))
        results = try FetchedResults(context: world, Item.self, orderBy: .ascending("rank"))
        try expect(results.count == n)
        let flag = flag
        results.onChange = { _ in flag.changes += 1 }
        all = try world.fetchIDs(Item.self)
    }

    func finish() async throws {
        results = nil; world = nil; stack = nil
    }

    func run(_ contender: Contender) async throws -> Sample? {
        guard contender == .contextStack else { return nil }
        let before = flag.changes
        var moves: [ObjectID: Int] = [:]
        while moves.count < min(touched, n) {
            moves[all[Int.random(in: 0..<all.count, using: &generator)]] = Int.random(in: (n / 4)...(3 * n / 4), using: &generator)
        }
        let start = try world.beginUpdateAndWait { [moves] update -> UInt64 in
            for (id, rank) in moves {
                guard let item = try update.fetch(Item.self, id: id) else { throw CSWrites.Missing() }
                item.rank = rank
            }
            let start = now()
            try update.commit()
            return start
        }
        while flag.changes == before {
            if seconds(since: start) > 60 { throw UnexpectedResult(description: "live: the results never reported the commit") }
            await Task.yield()
        }
        let live = seconds(since: start)
        // The results hold every object, in rank order, the moved ones with their new ranks.
        var previous = Int.min
        for item in results.objects {
            try expect(item.rank >= previous)
            previous = item.rank
            if let rank = moves[item.objectID] { try expect(item.rank == rank) }
        }
        // The alternative: fetch everything again, in the same order.
        var refetched: [Item] = []
        let refetch = try measure { refetched = try world.fetchAll(Item.self, orderBy: .ascending("rank")) }
        try expect(refetched.count == n && results.count == n)
        try await stack.flush()
        return Sample(seconds: live, extra: ["refetch": refetch])
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let live = result.median(.contextStack), let refetch = result.median(.contextStack, extra: "refetch") else {
            return Verdict(met: nil, note: "missing samples")
        }
        return Verdict(met: live <= 0.01 * refetch, note: String(format: "%.2f %% of a refetch (%@)", live / refetch * 100, Table.time(refetch)))
    }
}

/// memory: walk 10 × N objects (1,000,000 by default), loading them 1,000 at a time, and read
/// one attribute of each. Measured: peak resident memory above what the process held before.
final class MemoryWorkload: WorkloadBase, Workload {
    let id = "memory"
    let summary = "iterate 10 × N objects, .batch(1000) (fetchCursor)"
    let target = "≤ 3 × raw time, peak RSS growth ≤ 64 MiB"
    private var raw: RawDatabase!
    private var pool: DatabasePool!
    private var stack: Stack!
    private var world: MainContext!
    private var count: Int { n * 10 }

    func prepare() async throws {
        raw = try RawDatabase(path: try fixture.filledPlainFile("memory-raw", count: count).path)
        pool = try fixture.pool(try fixture.filledPlainFile("memory-grdb", count: count))
        (stack, world) = try threeTier(try fixture.filledStoreFile("memory-cs", count: count))
    }

    func finish() async throws {
        raw = nil; pool = nil; world = nil; stack = nil
    }

    func run(_ contender: Contender) async throws -> Sample? {
        // What the last repetition held is let go first, and the baseline is taken after the
        // freed memory went back to the system: otherwise the walk reuses it without growing
        // the resident size, and the growth reads 0.
        if contender == .contextStack { world.reset() }
        let baseline = Machine.resetPeak()
        var total = 0.0
        var seen = 0
        let elapsed: Double
        switch contender {
        case .raw:
            let statement = try raw.prepare("SELECT \(Raw.columns) FROM \"Item\"")
            elapsed = try measure {
                while try statement.step() {
                    total += Raw.item(statement).price
                    seen += 1
                }
                statement.reset()
            }
        case .grdb:
            let pool = pool!
            elapsed = try measure {
                try pool.read { db in
                    let cursor = try GItem.fetchCursor(db)
                    while let item = try cursor.next() {
                        total += item.price
                        seen += 1
                    }
                }
            }
        case .contextStack:
            elapsed = try measure {
                var cursor = try world.fetchCursor(Item.self, options: .batch(1000))
                while let item = try cursor.next() {
                    total += item.price
                    seen += 1
                }
            }
        }
        try expect(seen == count && total > 0)
        let growth = Double(max(0, (Machine.peakResidentBytes() ?? 0) - baseline))
        return Sample(seconds: elapsed, extra: ["peakGrowthMiB": growth / 1_048_576])
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let cs = result.median(.contextStack, extra: "peakGrowthMiB"), let csTime = result.median(.contextStack),
              let rawTime = result.median(.raw) else { return Verdict(met: nil, note: "missing samples") }
        let raw = result.median(.raw, extra: "peakGrowthMiB") ?? .nan
        let grdb = result.median(.grdb, extra: "peakGrowthMiB") ?? .nan
        return Verdict(met: cs <= 64 && csTime <= 3 * rawTime,
                       note: String(format: "peak RSS growth: CS %.1f MiB (raw %.1f, GRDB %.1f)", cs, raw, grdb))
    }
}
