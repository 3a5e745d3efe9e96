import Foundation

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
/// changes to the main context — without waiting for the main actor — and the main context
/// applies them before its next read; the root writes them to SQLite in the background.
@MainActor
public final class MainContext {
    /// The stack this context reads from.
    public nonisolated let stack: Stack
    /// Where updates started from this context commit to.
    public nonisolated let updateTarget: UpdateTarget
    /// How updates started from this context are ordered.
    public nonisolated let updateOrder: UpdateOrder
    nonisolated let core: ObjectContext

    /// A main context of `stack`.
    ///
    /// - Parameters:
    ///   - stack: the stack to read from.
    ///   - updateTarget: where updates started here commit (`.mainContext`: three-tier).
    ///   - updateOrder: `.default` runs updates concurrently, each in its own context.
    /// - Throws: `StackError` when the target does not fit the stack.
    public init(stack: Stack, updateTarget: UpdateTarget = .mainContext, updateOrder: UpdateOrder = .default) throws {
        guard updateTarget == .mainContext else {
            throw StackError(.unsupportedTopology, "This version of ContextStack supports the three-tier topology (updateTarget: .mainContext).")
        }
        guard updateOrder == .default else {
            throw StackError(.unsupportedTopology, "This version of ContextStack runs updates in the .default order only.")
        }
        self.stack = stack
        self.updateTarget = updateTarget
        self.updateOrder = updateOrder
        self.core = ObjectContext(kind: .main, stack: stack)
    }

    // MARK: Reading

    /// The first object matching `condition` in `orderBy` order, or `nil`.
    ///
    /// For example:
    ///
    /// ```swift
    /// let monk = try world.fetch(Person.self, %"name" == "Monk")
    /// // SELECT … FROM "Person" AS t0 WHERE t0."name" IS ? ORDER BY t0."Z_PK" ASC LIMIT 1
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
    /// fetch again.
    public func reset() {
        core.checkExecution("reset()")
        core.reset()
    }

    // MARK: Updating

    /// An update context whose commits go to this context's target.
    nonisolated func makeUpdateContext(waitsForSaves: Bool = false) -> UpdateContext {
        let stack = self.stack
        let main = self.core
        return UpdateContext(stack: stack, waitsForSaves: waitsForSaves) { changes, claimed in
            let store = stack.store
            switch stack.rootContext {
            case .shared:
                return store.enqueue(changes, claimed: claimed) { main.handOver(changes) }
            case .none:
                try store.writeNow(changes) { main.handOver(changes) }
                return nil
            }
        }
    }

    /// Runs `block` in a new update context, in the background. Errors it throws roll the
    /// update back and go to `stack.onError`.
    public nonisolated func beginUpdate(_ block: @escaping @Sendable (Update) throws -> Void) {
        makeUpdateContext().perform(block)
    }

    /// Runs `block` in a new update context and waits for it; rethrows what it throws (the
    /// update is rolled back first). Safe to call on the main actor: committing never waits
    /// for the main actor.
    @discardableResult
    public nonisolated func beginUpdateAndWait<T>(_ block: (Update) throws -> T) throws -> T {
        try makeUpdateContext().performAndWait(block)
    }

    /// A long-lived update context: changes accumulate across its `perform` blocks until a
    /// block commits them.
    public nonisolated func beginUpdateContext() -> UpdateContext {
        makeUpdateContext()
    }

    /// Runs `body` in a new update context, commits when it returns (rolls back when it
    /// throws), and resumes once the changes are in SQLite.
    ///
    /// For example:
    ///
    /// ```swift
    /// let removed = try await world.transaction { update in
    ///     try update.deleteAll(Person.self, %"age" < 0)
    /// }
    /// ```
    public nonisolated func transaction<T: Sendable>(_ body: @escaping @Sendable (Update) throws -> T) async throws -> T {
        let context = makeUpdateContext(waitsForSaves: true)
        let result: T = try await withCheckedThrowingContinuation { continuation in
            context.perform { update in
                do {
                    let value = try body(update)
                    try update.commit()
                    continuation.resume(returning: value)
                } catch {
                    update.rollback()
                    continuation.resume(throwing: error)
                }
            }
        }
        if let sequence = context.lastSequence {
            try await stack.store.waitUntilWritten(sequence)
        }
        return result
    }
}
