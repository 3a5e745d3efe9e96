import ContextStack
import Foundation

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

/// live: a FetchedResults of N rows, a commit touching 10 of them.
final class LiveWorkload: WorkloadBase, Workload {
    let id = "live"
    let summary = "FetchedResults of N rows, a commit touching 10: until it updates"
    let target = "≤ 1 % of a full refetch"
    var unavailable: String? { "API not landed: FetchedResults" }

    func run(_ contender: Contender) async throws -> Sample? { nil }

    func verdict(_ result: WorkloadResult) -> Verdict { Verdict(met: nil, note: "n/a") }
}

/// memory: iterate 1,000,000 objects fetched in batches of 1,000.
final class MemoryWorkload: WorkloadBase, Workload {
    let id = "memory"
    let summary = "iterate 1,000,000 objects with .batch(1000)"
    let target = "peak RSS growth ≤ 64 MiB"
    var unavailable: String? { "API not landed: FetchOptions.batch" }

    func run(_ contender: Contender) async throws -> Sample? { nil }

    func verdict(_ result: WorkloadResult) -> Verdict { Verdict(met: nil, note: "n/a") }
}
