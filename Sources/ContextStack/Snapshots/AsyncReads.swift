import _ContextStackCore
import _ContextStackModel

/// The async reads of `Context` and `MainContext`: values, never objects, for request handlers
/// and other code on Swift's cooperative pool.
///
/// Each one runs its statements on a thread of the library's own (never a thread of the
/// cooperative pool, never the main actor) with a reader connection of the store's (never
/// waiting for the writer), and resumes the caller with the result. It sees every commit made
/// before the call — written, or still on its way to the store — and no update's pending
/// changes or main context's pinned view. See Docs/Servers.md.
extension Stack {
    /// The snapshots of `type`'s objects. Inlinable, so that making each snapshot from its row
    /// and appending it is specialized for the concrete snapshot type in the caller's module;
    /// generic code here went through the type's value witnesses for every field of every row.
    @inlinable
    func snapshots<T: SnapshotProviding>(_ type: T.Type, _ condition: Condition?, orderBy: OrderBy?,
                                         options: FetchOptions) async throws -> [T.Snapshot] {
        try await readSnapshots(type, condition, orderBy: orderBy, options: options) { snapshots, row in
            snapshots.append(T.Snapshot(_cs_row: row))
        }
    }

    @inlinable
    func snapshot<T: SnapshotProviding>(_ type: T.Type, id: ObjectID) async throws -> T.Snapshot? {
        try await readSnapshotRow(type, id: id) { row in row.map { T.Snapshot(_cs_row: $0) } }
    }

    /// Reads the rows on a read thread and makes the snapshots there, as each row is read,
    /// with `add`.
    @usableFromInline
    func readSnapshots<T: SnapshotProviding>(_ type: T.Type, _ condition: Condition?, orderBy: OrderBy?, options: FetchOptions,
                                             add: @escaping @Sendable (inout [T.Snapshot], borrowing _SnapshotRow) -> Void) async throws -> [T.Snapshot] {
        try Task.checkCancellation()
        let store = self.store
        let entity = store.graph.entity(for: type)
        let snapshotEntity = store.graph.entity(for: T.Snapshot.Entity.self)
        return try await ReadThreads.shared.run {
            var snapshots: [T.Snapshot] = []
            try store.eachSnapshotRow(of: snapshotEntity, entity: entity, condition: condition, orderBy: orderBy, options: options,
                                      expecting: { snapshots.reserveCapacity($0) }) { row in add(&snapshots, row) }
            return snapshots
        }
    }

    @usableFromInline
    func readSnapshotRow<T: SnapshotProviding, S: Sendable>(_ type: T.Type, id: ObjectID,
                                                           make: @escaping @Sendable (_SnapshotRow?) -> S) async throws -> S {
        try Task.checkCancellation()
        let store = self.store
        let entity = store.graph.entity(for: type)
        let snapshotEntity = store.graph.entity(for: T.Snapshot.Entity.self)
        return try await ReadThreads.shared.run { make(try store.snapshotRow(of: snapshotEntity, entity: entity, id: id)) }
    }

    func count<T: ManagedObject>(_ type: T.Type, _ condition: Condition?) async throws -> Int {
        try Task.checkCancellation()
        let store = self.store
        let entity = store.graph.entity(for: type)
        return try await ReadThreads.shared.run { try store.count(entity: entity, condition: condition) }
    }

    func aggregate<T: ManagedObject>(_ type: T.Type, _ select: Select, _ condition: Condition?, orderBy: OrderBy?,
                                     groupBy: KeyList?, having: Condition?, options: FetchOptions) async throws -> [Row] {
        try Task.checkCancellation()
        let store = self.store
        let entity = store.graph.entity(for: type)
        // The commits handed over before the call are waited for here, suspended, not on a
        // read thread: read threads are few and shared, and a writer held up (a lock another
        // transaction holds) would hold every read behind aggregates waiting on them.
        await store.awaitQueuedWritten()
        try Task.checkCancellation()
        return try await ReadThreads.shared.run {
            try store.aggregate(entity: entity, select: select, condition: condition, orderBy: orderBy,
                                groupBy: groupBy, having: having, options: options, waitsForQueued: false)
        }
    }
}
