import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// The context your reads come from: a read-only object cache on the main actor.
///
/// For example:
///
/// ```swift
/// let world = try MainContext(stack: stack)
/// try world.beginUpdateAndWait { update in
///     let farmer = try update.create(Person.self)
///     farmer.name = "Farmer"
///     try update.commit()
/// }
/// let farmer = try world.fetch(Person.self, %"name" == "Farmer")
/// ```
///
/// Objects of a main context are read-only: change them in an update (`update.use(object)`).
/// In the three-tier stack (`updateTarget: .mainContext`), an update's `commit()` hands its
/// changes to the main context — without waiting for the main actor — and the root writes them
/// to SQLite in the background. Fetches see a commit as soon as `commit()` returns; objects the
/// context holds take new values when a fetch starts, when a `beginUpdateAndWait` started on
/// the main actor returns, and on the main actor's next turn — never between two property
/// reads.
@MainActor
public final class MainContext: CommitSource {
    /// The stack this context reads from.
    public nonisolated let stack: Stack
    /// Where updates started from this context commit to.
    public nonisolated let updateTarget: UpdateTarget
    /// How updates started from this context are ordered.
    public nonisolated let updateOrder: UpdateOrder
    /// How commits of updates started here resolve conflicts with the store.
    public nonisolated let mergePolicy: MergePolicy
    /// Identifies this context as the origin of commits.
    public nonisolated var contextID: ContextID { starter.id }
    nonisolated let core: ContextCore
    nonisolated let starter: UpdateStarter
    private var resetRegistration: UInt64?
    /// The delivery (`CommitHub.deliveries`) whose commit last reset this context.
    var resetForDelivery: UInt64 = 0
    /// The live results reading this context, reloaded when it resets (and told of corrections
    /// of its pinned view when it does not merge).
    let live = LiveRegistry()

    /// A main context of `stack`.
    ///
    /// For example:
    ///
    /// ```swift
    /// let world = try MainContext(stack: stack)                                        // three-tier
    /// let auto = try MainContext(stack: stack, updateTarget: .rootContext(autoMerge: true))
    /// let screen = try MainContext(stack: stack, updateTarget: .persistentStore, resetOnCommitOf: updater)
    /// ```
    ///
    /// A main context that merges — `.mainContext` (its own updates' commits) or
    /// `.rootContext(autoMerge: true)` (every save of the root) — shows commits as they land.
    /// One that does not — `.rootContext(autoMerge: false)`, `.persistentStore` — reads the
    /// store as it was when the context was created or last reset, and sees nothing newer
    /// until `reset()`.
    ///
    /// - Parameters:
    ///   - stack: the stack to read from.
    ///   - updateTarget: where updates started here commit (`.mainContext`: three-tier).
    ///   - updateOrder: `.default` runs updates concurrently; `.serial` one at a time.
    ///   - mergePolicy: how those commits resolve conflicts with the store.
    ///   - resetOnCommitOf: reset this context before the observers of each commit of that
    ///     context run (the per-consumer topology) — and before those of every remote commit.
    ///   - author: recorded with the commits of updates started here, in the store's history
    ///     (`HistoryTransaction.author`) and in `Commit.author`.
    /// - Throws: `StackError` when the target does not fit the stack.
    public init(stack: Stack, updateTarget: UpdateTarget = .mainContext, updateOrder: UpdateOrder = .default,
                mergePolicy: MergePolicy = .objectTrump, resetOnCommitOf source: (any CommitSource)? = nil,
                author: String? = nil) throws {
        try Self.validate(updateTarget, on: stack)
        self.stack = stack
        self.updateTarget = updateTarget
        self.updateOrder = updateOrder
        self.mergePolicy = mergePolicy
        let merges = updateTarget == .mainContext || updateTarget == .rootContext(autoMerge: true)
        let core = ContextCore(kind: .main, host: stack, pinsView: !merges)
        self.core = core
        self.starter = UpdateStarter(stack: stack, target: updateTarget, order: updateOrder, policy: mergePolicy, main: core, author: author)
        if !merges {
            // Its live results hear no commits; they follow what corrects its view.
            let live = self.live
            core.afterCorrection = { touched in live.contextWasCorrected(touched: touched) }
        }
        if updateTarget == .rootContext(autoMerge: true) { stack.addAutoMerger(core) }
        if updateTarget == .mainContext { stack.addThreeTierMain(core) }
        stack.wantRemoteCommits()
        if let source {
            resetRegistration = stack.commits.addResetter(origin: source.contextID) { [weak self] commit in
                guard let self else { return }
                // What the commit touched is reported as a merging context's results report it.
                reset(touched: Set(commit.inserted + commit.updated + commit.deleted))
                resetForDelivery = self.stack.commits.deliveries
            }
        }
    }

    isolated deinit {
        if let resetRegistration { stack.commits.remove(resetRegistration) }
    }

    nonisolated static func validate(_ target: UpdateTarget, on stack: Stack) throws {
        if case .rootContext = target, stack.rootContext == .none {
            throw StackError(.unsupportedTopology, "updateTarget: .rootContext needs a root: create the stack with rootContext: .shared, or commit to .mainContext or .persistentStore.")
        }
    }

    // MARK: Reading

    /// The first object matching `condition` in `orderBy` order, or `nil`.
    ///
    /// For example:
    ///
    /// ```swift
    /// let monk = try world.fetch(Person.self, %"name" == "Monk")
    /// // SELECT … FROM "Person" AS t0 WHERE t0."name" IS ? ORDER BY t0."Z_PK" ASC LIMIT ? OFFSET ?
    /// ```
    ///
    /// - Throws: `QueryError` for an unknown key or a value of the wrong type.
    public func fetch<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil,
                                        options: FetchOptions = FetchOptions()) throws -> T? {
        try core.fetchFirst(type, condition, orderBy: orderBy, options: options)
    }

    /// Every object matching `condition`, in `orderBy` order, windowed by `options`.
    ///
    /// For example:
    ///
    /// ```swift
    /// let people = try world.fetchAll(Person.self, %"age" >= 18, orderBy: .ascending("name"), options: .limit(10))
    /// ```
    public func fetchAll<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil,
                                           options: FetchOptions = FetchOptions()) throws -> [T] {
        try core.fetchAll(type, condition, orderBy: orderBy, options: options)
    }

    /// A cursor over the objects matching `condition`, loading them `.batch(n)` at a time
    /// (1000 by default): walking millions of objects keeps memory flat.
    ///
    /// For example:
    ///
    /// ```swift
    /// var people = try world.fetchCursor(Person.self, orderBy: .ascending("name"), options: .batch(500))
    /// while let person = try people.next() { print(person.name) }
    /// ```
    public func fetchCursor<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil,
                                              options: FetchOptions = FetchOptions()) throws -> FetchCursor<T> {
        try core.fetchCursor(type, condition, orderBy: orderBy, options: options)
    }

    /// How many objects match `condition`.
    public func fetchCount<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil) throws -> Int {
        try core.fetchCount(type, condition)
    }

    /// The IDs of the objects matching `condition`, without materializing them.
    public func fetchIDs<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil,
                                           options: FetchOptions = FetchOptions()) throws -> [ObjectID] {
        try core.fetchIDs(type, condition, orderBy: orderBy, options: options)
    }

    /// The object with `id`, or `nil` when there is none. A registered object costs no SQL.
    public func fetch<T: ManagedObject>(_ type: T.Type, id: ObjectID) throws -> T? {
        try core.fetch(type, id: id)
    }

    /// Drops every object of this context. Using one afterwards is a precondition failure:
    /// fetch again. A context that does not merge sees the store as it is now from here on.
    public func reset() {
        reset(touched: [])
    }

    /// `reset()`, its live results reporting `touched` as updated where they still show it.
    private func reset(touched: Set<ObjectID>) {
        core.checkExecution("reset()")
        core.reset()
        live.contextDidReset(touched: touched)
    }

    // MARK: Updating

    /// Runs `block` in a new update context, in the background. Errors it throws roll the
    /// update back and go to `stack.onError`.
    public nonisolated func beginUpdate(_ block: @escaping @Sendable (Update) throws -> Void) {
        starter.beginUpdate(block)
    }

    /// Runs `block` in a new update context and waits for it; rethrows what it throws (the
    /// update is rolled back first). Safe to call on the main actor: committing never waits
    /// for the main actor. Under `.serial`, calling it from inside one of this context's own
    /// updates is a precondition failure (it would wait for its own turn).
    @discardableResult
    public nonisolated func beginUpdateAndWait<T>(_ block: (Update) throws -> T) throws -> T {
        try starter.beginUpdateAndWait(block)
    }

    /// A long-lived update context: changes accumulate across its `perform` blocks until a
    /// block commits them.
    public nonisolated func beginUpdateContext() -> UpdateContext {
        starter.makeUpdateContext()
    }

    /// Runs `body` in a new update context, commits when it returns (rolls back when it
    /// throws), and resumes once the changes are in SQLite.
    ///
    /// Every commit the block makes is waited for, also when it throws after committing: the
    /// call throws the block's error, or else the first commit's save error, and any other
    /// save error of its commits goes to `stack.onError`. A commit of an `update.perform`
    /// continuation, which runs after the call returned, is not waited for.
    ///
    /// For example:
    ///
    /// ```swift
    /// let removed = try await world.transaction { update in
    ///     try update.deleteAll(Person.self, %"age" < 0)
    /// }
    /// ```
    public nonisolated func transaction<T: Sendable>(_ body: @escaping @Sendable (Update) throws -> T) async throws -> T {
        try await starter.transaction(body)
    }

    // MARK: Observing

    /// Calls `block` on the main actor after each commit of an update started from this
    /// context, once the commit is visible at its target.
    ///
    /// - Returns: a token; observing stops when it is released or cancelled.
    public nonisolated func observeCommit(_ block: @escaping @MainActor @Sendable (Commit) -> Void) -> CommitObservation {
        stack.commits.addObserver(origin: contextID, block)
    }

    /// The commits of updates started from this context, as an asynchronous sequence.
    public nonisolated var commits: AsyncStream<Commit> { stack.commits.stream(origin: contextID) }
}

/// A context that starts updates, and so can be the origin of commits (`resetOnCommitOf:`).
public protocol CommitSource: AnyObject, Sendable {
    /// Identifies the context as the origin of commits.
    var contextID: ContextID { get }
}
