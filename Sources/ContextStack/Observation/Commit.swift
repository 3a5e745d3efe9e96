import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// What one commit changed, as commit observers receive it: inserted, updated (with the keys
/// that changed) and deleted object IDs, by entity, and where the commit came from.
///
/// For example:
///
/// ```swift
/// let token = updater.observeCommit { commit in
///     for id in commit.updated { print(id, commit.changedKeys(of: id)) }
/// }
/// ```
public struct Commit: Sendable, CustomStringConvertible {
    /// Objects created by the commit.
    public let inserted: [ObjectID]
    /// Objects changed by the commit (relationship changes stored on the other side count
    /// for the object whose column changed).
    public let updated: [ObjectID]
    /// Objects deleted by the commit.
    public let deleted: [ObjectID]
    /// The context the commit was started from; for a remote commit, `ContextID.remote`.
    public let origin: ContextID
    /// Where the commit was saved to (`.persistentStore` for a remote commit).
    public let target: UpdateTarget
    /// Whether another process, machine or stack made the commit: it reached this stack
    /// through the store's history (Docs/History.md).
    public let isRemote: Bool
    /// The `author:` of the context whose update made the commit, or `nil`.
    public let author: String?
    /// Where the commit sits in the store's history: set for remote commits, and for local
    /// ones delivered once written (`.persistentStore` targets, batch operations) by a store
    /// that tracks history; `nil` for a commit delivered before the root wrote it.
    public let token: HistoryToken?
    /// Whether the commit undoes one that was announced and then failed to save: its inserts
    /// are objects that commit deleted, back (`observe(_:)` reports them so).
    let undoesFailedSave: Bool
    private let changedKeysByID: [ObjectID: Set<String>]
    private let entities: [ObjectID: EntityDescription]

    init(_ changes: ChangeSet, origin: ContextID, target: UpdateTarget) {
        let summary = ChangeSummary(changes)
        inserted = summary.inserted.map(\.id)
        updated = summary.updated.map(\.id)
        deleted = summary.deleted.map(\.id)
        self.origin = origin
        self.target = target
        isRemote = false
        undoesFailedSave = changes.undoesFailedSave
        author = changes.info.author
        token = changes.info.token
        var keys: [ObjectID: Set<String>] = [:]
        var entities: [ObjectID: EntityDescription] = [:]
        for (id, entity) in summary.inserted { entities[id] = entity }
        for (id, entity, changed) in summary.updated {
            keys[id] = changed
            entities[id] = entity
        }
        for (id, entity) in summary.deleted { entities[id] = entity }
        changedKeysByID = keys
        self.entities = entities
    }

    /// A commit another stack wrote, as the history recorded it.
    init(remote transaction: HistoryTransaction, graph: ModelGraph) {
        var inserted: [ObjectID] = [], updated: [ObjectID] = [], deleted: [ObjectID] = []
        var keys: [ObjectID: Set<String>] = [:]
        var entities: [ObjectID: EntityDescription] = [:]
        for change in transaction.changes {
            entities[change.objectID] = graph.entity(named: change.entityName)?.description_ ?? change.objectID.rootEntity
            switch change.kind {
            case .insert: inserted.append(change.objectID)
            case .update:
                updated.append(change.objectID)
                keys[change.objectID] = change.changedKeys
            case .delete: deleted.append(change.objectID)
            }
        }
        self.inserted = inserted
        self.updated = updated
        self.deleted = deleted
        origin = .remote
        target = .persistentStore
        isRemote = true
        undoesFailedSave = false
        author = transaction.author
        token = transaction.token
        changedKeysByID = keys
        self.entities = entities
    }

    /// The keys the commit changed on `id` (empty for objects it did not update).
    public func changedKeys(of id: ObjectID) -> Set<String> { changedKeysByID[id] ?? [] }

    /// The name of the entity of a changed object (a sub-entity by its own name).
    public func entityName(of id: ObjectID) -> String? { entities[id]?.name }

    /// The inserted objects of one entity (sub-entities included).
    public func inserted(_ type: ManagedObject.Type) -> [ObjectID] { filter(inserted, type) }
    /// The updated objects of one entity (sub-entities included).
    public func updated(_ type: ManagedObject.Type) -> [ObjectID] { filter(updated, type) }
    /// The deleted objects of one entity (sub-entities included).
    public func deleted(_ type: ManagedObject.Type) -> [ObjectID] { filter(deleted, type) }

    /// True when the commit changed nothing.
    public var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }

    private func filter(_ ids: [ObjectID], _ type: ManagedObject.Type) -> [ObjectID] {
        let wanted = type.entityDescription
        return ids.filter { id in
            var entity = entities[id]
            while let current = entity {
                if current === wanted { return true }
                entity = current.superentity
            }
            return false
        }
    }

    public var description: String {
        "Commit(\(isRemote ? "remote, " : "")inserted: \(inserted.count), updated: \(updated.count), deleted: \(deleted.count))"
    }
}

/// Identifies a context (`MainContext` or `Context`), as the origin of commits.
public struct ContextID: Hashable, Sendable, CustomStringConvertible {
    let rawValue: UInt64
    /// The origin of remote commits: another process, machine or stack made them.
    public static let remote = ContextID(rawValue: 0)
    public var description: String { rawValue == 0 ? "remote" : "context#\(rawValue)" }
}
