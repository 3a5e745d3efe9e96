import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// A context that starts updates and has no objects of its own: it cannot fetch. Use it for
/// the writer of the per-consumer topology, or for background work that needs no main context.
///
/// For example:
///
/// ```swift
/// let stack = try Stack(model: model, rootContext: .none)
/// let updater = try Context(stack: stack, updateTarget: .persistentStore, updateOrder: .serial)
/// let screen = try MainContext(stack: stack, updateTarget: .persistentStore, resetOnCommitOf: updater)
/// updater.beginUpdate { update in
///     try update.create(Person.self).name = "Farmer"
///     try update.commit()          // in SQLite when this returns; then `screen` resets
/// }
/// ```
public final class Context: CommitSource {
    /// The stack the context saves into.
    public let stack: Stack
    /// Where updates started from this context commit to.
    public let updateTarget: UpdateTarget
    /// How updates started from this context are ordered.
    public let updateOrder: UpdateOrder
    /// How commits of updates started here resolve conflicts with the store.
    public let mergePolicy: MergePolicy
    let starter: UpdateStarter

    /// Identifies this context as the origin of commits.
    public var contextID: ContextID { starter.id }

    /// A context whose updates commit to `updateTarget`.
    ///
    /// - Parameters:
    ///   - updateTarget: `.persistentStore` (the default: SQLite is written before `commit()`
    ///     returns) or `.rootContext(autoMerge:)` (through the root writer). `.mainContext`
    ///     needs a `MainContext`.
    ///   - author: recorded with this context's commits, in the store's history
    ///     (`HistoryTransaction.author`) and in `Commit.author`.
    /// - Throws: `StackError` when the target does not fit.
    public init(stack: Stack, updateTarget: UpdateTarget = .persistentStore, updateOrder: UpdateOrder = .default,
                mergePolicy: MergePolicy = .objectTrump, author: String? = nil) throws {
        if updateTarget == .mainContext {
            throw StackError(.unsupportedTopology, "A Context has no main context to commit into: use a MainContext for updateTarget: .mainContext, or commit to .rootContext or .persistentStore.")
        }
        try MainContext.validate(updateTarget, on: stack)
        self.stack = stack
        self.updateTarget = updateTarget
        self.updateOrder = updateOrder
        self.mergePolicy = mergePolicy
        self.starter = UpdateStarter(stack: stack, target: updateTarget, order: updateOrder, policy: mergePolicy, main: nil, author: author)
    }

    /// Runs `block` in a new update context, in the background. Errors it throws roll the
    /// update back and go to `stack.onError`.
    public func beginUpdate(_ block: @escaping @Sendable (Update) throws -> Void) {
        starter.beginUpdate(block)
    }

    /// Runs `block` in a new update context and waits for it; rethrows what it throws.
    @discardableResult
    public func beginUpdateAndWait<T>(_ block: (Update) throws -> T) throws -> T {
        try starter.beginUpdateAndWait(block)
    }

    /// A long-lived update context.
    public func beginUpdateContext() -> UpdateContext {
        starter.makeUpdateContext()
    }

    /// Runs `body` in a new update context, commits when it returns, and resumes once durable.
    ///
    /// Every commit the block makes is waited for, also when it throws after committing: the
    /// call throws the block's error, or else the first commit's save error, and any other
    /// save error of its commits goes to `stack.onError`. A commit of an `update.perform`
    /// continuation, which runs after the call returned, is not waited for.
    public func transaction<T: Sendable>(_ body: @escaping @Sendable (Update) throws -> T) async throws -> T {
        try await starter.transaction(body)
    }

    /// Calls `block` on the main actor after each commit of an update started from this
    /// context, once the commit is visible at its target.
    public func observeCommit(_ block: @escaping @MainActor @Sendable (Commit) -> Void) -> CommitObservation {
        stack.commits.addObserver(origin: contextID, block)
    }

    /// The commits of updates started from this context, as an asynchronous sequence.
    public var commits: AsyncStream<Commit> { stack.commits.stream(origin: contextID) }
}
