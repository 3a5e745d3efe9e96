import _ContextStackCore
import _ContextStackModel

/// What the async reads need of a context: the stack it reads. `Context` and `MainContext`
/// conform; on a `MainContext` the reads are not isolated to the main actor, so any task may
/// await them.
public protocol AsyncReading: AnyObject, Sendable {
    /// The stack the context reads.
    var stack: Stack { get }
}

extension Context: AsyncReading {}
extension MainContext: AsyncReading {}

extension AsyncReading {
    /// Snapshots of the objects matching `condition`, read straight from rows without making
    /// managed objects, off the cooperative pool and the main actor.
    ///
    /// For example:
    ///
    /// ```swift
    /// let page: [Person.Snapshot] = try await context.snapshots(Person.self, %"age" >= 18,
    ///                                                          orderBy: .ascending("name"), options: .limit(50))
    /// ```
    ///
    /// The read sees every commit made before the call and no update's pending changes — and,
    /// on a main context that does not merge, not its pinned view but the latest state.
    /// `options` windows and filters the rows (`.limit`, `.offset`, `.noSubEntities`); the
    /// options that shape objects (`.batch`, `.prefetch`, `.propertiesOnly`) change nothing.
    ///
    /// - Throws: `QueryError` for a condition or order the store cannot read.
    @inlinable
    public func snapshots<T: SnapshotProviding>(_ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil,
                                                options: FetchOptions = FetchOptions()) async throws -> [T.Snapshot] {
        try await stack.snapshots(type, condition, orderBy: orderBy, options: options)
    }

    /// The snapshot of the object with `id`, or `nil` when it does not exist (or is not a `T`).
    @inlinable
    public func snapshot<T: SnapshotProviding>(_ type: T.Type, id: ObjectID) async throws -> T.Snapshot? {
        try await stack.snapshot(type, id: id)
    }

    /// How many objects match `condition`, read as `snapshots` reads.
    public func count<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil) async throws -> Int {
        try await stack.count(type, condition)
    }

    /// Aggregate rows, as `MainContext.query`, off the cooperative pool and the main actor.
    ///
    /// For example: `try await context.aggregate(Person.self, .average("age", alias: "avg"), groupBy: %"location")`.
    public func aggregate<T: ManagedObject>(_ type: T.Type, _ select: Select, _ condition: Condition? = nil,
                                            orderBy: OrderBy? = nil, groupBy: (any KeyListConvertible)? = nil,
                                            having: Condition? = nil, options: FetchOptions = FetchOptions()) async throws -> [Row] {
        try await stack.aggregate(type, select, condition, orderBy: orderBy, groupBy: groupBy?.keyList, having: having, options: options)
    }

    /// The first value of the first row of an aggregate query, or `.null` when there is no row.
    public func aggregateValue<T: ManagedObject>(_ type: T.Type, _ select: Select, _ condition: Condition? = nil) async throws -> Value {
        try await aggregate(type, select, condition).first?.values.first ?? .null
    }
}

extension Update {
    /// Sets the object `snapshot` was taken from to the snapshot's values: its attributes, its
    /// to-one relationships and the members of its to-many relationships.
    ///
    /// With `expecting`, the snapshot the client read before editing, the update first checks
    /// that the object's stored values still equal it, and its commit checks again, as it is
    /// saved, that nothing changed the row since — so an edit based on stale values never
    /// overwrites another writer's change, whatever the merge policy (a lost update).
    ///
    /// For example:
    ///
    /// ```swift
    /// try await context.transaction { update in
    ///     try update.apply(edited, expecting: original)
    /// }
    /// ```
    ///
    /// - Throws: `MergeConflictError`, now or from the commit, when a value differs from
    ///   `expecting` (one conflict per property, with the expected, stored and new values),
    ///   when the object was deleted (the key `"<deleted>"`), or when a relationship names an
    ///   object that no longer exists. Nothing is changed then.
    public func apply<S: EntitySnapshot>(_ snapshot: S, expecting original: S? = nil) throws {
        try core.apply(snapshot, expecting: original)
    }
}
