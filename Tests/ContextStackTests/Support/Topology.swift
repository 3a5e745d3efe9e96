@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Dispatch
import Foundation

/// The topologies every behaviour runs on.
enum Topology: String, CaseIterable, CustomStringConvertible, Sendable {
    /// update → main → root → store.
    case threeTier
    /// update → main → store (no root: commit writes SQLite).
    case threeTierWithoutRoot
    /// update → root → store; the main context merges the root's saves.
    case twoTierAutoMerge
    /// update → root → store; the main context sees nothing until it resets.
    case twoTierWithoutMerge
    /// A shared Context writing the store; a main context per consumer, reset on its commits.
    case perConsumer

    var description: String { rawValue }
}

/// One configuration a behaviour runs on: a topology over a kind of store. The conformance
/// suites take `Setup.all` as their arguments, so every behaviour written once runs on every
/// topology and every store kind (SQLite file, SQLite in memory, PostgreSQL when a server is
/// available).
struct Setup: Sendable, CustomStringConvertible {
    let topology: Topology
    let kind: StoreKind

    static let all: [Setup] = Topology.allCases.flatMap { topology in
        StoreKind.available.map { Setup(topology: topology, kind: $0) }
    }

    /// The setups whose main context applies commits to the objects it holds (instead of
    /// keeping a pinned view until it resets), for behaviours of held objects.
    static let merging = all.filter { [.threeTier, .threeTierWithoutRoot, .twoTierAutoMerge].contains($0.topology) }

    /// The setups with a file, for behaviours that reopen it.
    static let files = all.filter { $0.kind == .file }

    var description: String { "\(topology) on \(kind)" }
}

/// A store, a reading main context and something that starts updates, wired as `topology` says.
@MainActor final class TopologyHarness {
    let topology: Topology
    let store: TestStore
    let world: MainContext
    let updater: Context?

    convenience init(_ topology: Topology, kind: StoreKind = .file, order: UpdateOrder = .default, policy: MergePolicy = .objectTrump) throws {
        try self.init(topology, order: order, policy: policy) { rootContext in try TestStore(kind, rootContext: rootContext) }
    }

    /// A harness over the store `makeStore` builds for the root context the topology needs.
    init(_ topology: Topology, order: UpdateOrder = .default, policy: MergePolicy = .objectTrump,
         makeStore: (Stack.RootContext) throws -> TestStore) throws {
        self.topology = topology
        switch topology {
        case .threeTier:
            store = try makeStore(.shared)
            world = try MainContext(stack: store.stack, updateOrder: order, mergePolicy: policy)
            updater = nil
        case .threeTierWithoutRoot:
            store = try makeStore(.none)
            world = try MainContext(stack: store.stack, updateOrder: order, mergePolicy: policy)
            updater = nil
        case .twoTierAutoMerge:
            store = try makeStore(.shared)
            world = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: true), updateOrder: order, mergePolicy: policy)
            updater = nil
        case .twoTierWithoutMerge:
            store = try makeStore(.shared)
            world = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false), updateOrder: order, mergePolicy: policy)
            updater = nil
        case .perConsumer:
            store = try makeStore(.none)
            let updater = try Context(stack: store.stack, updateTarget: .persistentStore, updateOrder: order, mergePolicy: policy)
            world = try MainContext(stack: store.stack, updateTarget: .persistentStore, resetOnCommitOf: updater)
            self.updater = updater
        }
    }

    convenience init(_ setup: Setup, order: UpdateOrder = .default, policy: MergePolicy = .objectTrump,
                     types: [ManagedObject.Type] = fullModelTypes) throws {
        try self.init(setup.topology, order: order, policy: policy) { rootContext in
            try TestStore(setup.kind, rootContext: rootContext, types: types)
        }
    }

    var stack: Stack { store.stack }

    /// Runs an update the way the topology starts them and returns once the reading main
    /// context shows what it committed. Topologies that show commits by resetting the main
    /// context invalidate the objects it held: fetch again after `write`.
    func write<T>(_ block: (Update) throws -> T) async throws -> T {
        let result = try update(block)
        try await stack.flush()
        try await settle()
        return result
    }

    /// The context updates start from.
    var source: any CommitSource { updater ?? world }

    func update<T>(_ block: (Update) throws -> T) throws -> T {
        if let updater { return try updater.beginUpdateAndWait(block) }
        return try world.beginUpdateAndWait(block)
    }

    func beginUpdate(_ block: @escaping @Sendable (Update) throws -> Void) {
        if let updater { updater.beginUpdate(block) } else { world.beginUpdate(block) }
    }

    func transaction<T: Sendable>(_ body: @escaping @Sendable (Update) throws -> T) async throws -> T {
        if let updater { return try await updater.transaction(body) }
        return try await world.transaction(body)
    }

    func observeCommit(_ block: @escaping @MainActor @Sendable (Commit) -> Void) -> CommitObservation {
        if let updater { return updater.observeCommit(block) }
        return world.observeCommit(block)
    }

    /// Brings the reading main context up to date, the way each topology does it.
    func settle() async throws {
        switch topology {
        case .threeTier, .threeTierWithoutRoot, .twoTierAutoMerge:
            break
        case .twoTierWithoutMerge:
            world.reset()
        case .perConsumer:
            // The reset runs on the main queue, queued by the commit: let it run.
            await mainQueueTurn()
        }
    }
}

/// Waits until everything queued on the main queue before the call has run.
func mainQueueTurn() async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        DispatchQueue.main.async { continuation.resume() }
    }
}

extension ContextStack.Context {
    /// Commits one new person named `name` in an update of this context; returns its ID.
    func commitPerson(named name: String) throws -> ObjectID {
        try beginUpdateAndWait { update in
            let person = try update.create(Person.self)
            person.name = name
            try update.commit()
            return person.objectID
        }
    }
}
