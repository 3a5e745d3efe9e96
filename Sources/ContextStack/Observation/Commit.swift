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
    public private(set) var updated: [ObjectID]
    /// Objects deleted by the commit.
    public let deleted: [ObjectID]
    /// The context the commit was started from.
    public let origin: ContextID
    /// Where the commit was saved to.
    public let target: UpdateTarget
    private let changedKeysByID: [ObjectID: Set<String>]
    private let entities: [ObjectID: EntityDescription]

    init(_ changes: ChangeSet, origin: ContextID, target: UpdateTarget) {
        inserted = changes.inserts.map(\.id)
        updated = changes.updates.map(\.id)
        deleted = changes.deletes.map(\.id)
        self.origin = origin
        self.target = target
        var keys: [ObjectID: Set<String>] = [:]
        var entities: [ObjectID: EntityDescription] = [:]
        for update in changes.updates {
            keys[update.id] = Set(update.slots.map { update.entity.properties[$0].name })
            entities[update.id] = update.entity.description_
        }
        for insert in changes.inserts { entities[insert.id] = insert.row.entity.description_ }
        for delete in changes.deletes { entities[delete.id] = delete.entity.description_ }
        // A many-to-many change updates both objects, under their relationships' names.
        var updated = self.updated
        let inserted = Set(self.inserted), deleted = Set(self.deleted)
        for link in changes.links {
            guard let ends = changes.linkEnds[link.key] else { continue }
            for (id, key) in [(ends.source, ends.sourceKey), (ends.target, ends.targetKey)] {
                guard let key, !inserted.contains(id), !deleted.contains(id) else { continue }
                if keys[id] == nil && entities[id] == nil { updated.append(id) }
                keys[id, default: []].insert(key)
                if entities[id] == nil { entities[id] = id.rootEntity }
            }
        }
        self.updated = updated
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
        "Commit(inserted: \(inserted.count), updated: \(updated.count), deleted: \(deleted.count))"
    }
}

/// Identifies a context (`MainContext` or `Context`), as the origin of commits.
public struct ContextID: Hashable, Sendable, CustomStringConvertible {
    let rawValue: UInt64
    public var description: String { "context#\(rawValue)" }
}
