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
    func snapshots<T: SnapshotProviding>(_ type: T.Type, _ condition: Condition?, orderBy: OrderBy?,
                                         options: FetchOptions) async throws -> [T.Snapshot] {
        try Task.checkCancellation()
        let store = self.store
        let entity = store.graph.entity(for: type)
        return try await ReadThreads.shared.run {
            try store.snapshots(T.Snapshot.self, entity: entity, condition: condition, orderBy: orderBy, options: options)
        }
    }

    func snapshot<T: SnapshotProviding>(_ type: T.Type, id: ObjectID) async throws -> T.Snapshot? {
        try Task.checkCancellation()
        let store = self.store
        let entity = store.graph.entity(for: type)
        return try await ReadThreads.shared.run { try store.snapshot(T.Snapshot.self, entity: entity, id: id) }
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
        return try await ReadThreads.shared.run {
            try store.aggregate(entity: entity, select: select, condition: condition, orderBy: orderBy,
                                groupBy: groupBy, having: having, options: options)
        }
    }
}
