import _ContextStackCore

/// The objects of one fetch that load their values together: a batch of `.batch(n)`, or the
/// objects of a `.noPropertyValues` / `.propertiesOnly` fetch (one group per object without a
/// batch size, as Core Data fires its faults one by one).
final class FaultGroup {
    /// The members, in fetch order.
    let ids: [ObjectID]
    /// The slots every member already holds (a `.propertiesOnly` fetch); empty for faults.
    let loadedSlots: Set<Int>
    /// Relationships to load with the members (`.prefetch`).
    let prefetch: [[Property]]

    init(ids: [ObjectID], loadedSlots: Set<Int>, prefetch: [[Property]]) {
        self.ids = ids
        self.loadedSlots = loadedSlots
        self.prefetch = prefetch
    }
}

extension ContextCore {
    // MARK: - Faults

    /// A fault for `id` in `group`, or the registered object (which keeps what it has).
    func materializeFault(_ id: ObjectID, _ row: ObjectRow, group: FaultGroup) -> ManagedObject {
        if let existing = registered(id) { return existing }
        if !mergedDeletions.isEmpty, let revived = revivedDeletion(id) {
            revived.values = row.values
            revived.fault = group
            return revived
        }
        let object = row.entity.type.init(_ObjectSeed(id: id, entity: row.entity, context: self, values: row.values))
        object.fault = group
        register(object)
        return object
    }

    /// Loads the values of `object` — and of the other members of its group still waiting —
    /// unless `slot` is one it already holds. A member whose row is gone (deleted below this
    /// context since the fetch) becomes a deleted object with default values in the slots it
    /// did not load, and comes back to life if that deletion's save fails (`revivedDeletion`).
    func fulfill(_ object: ManagedObject, slot: Int?) {
        guard let group = object.fault else { return }
        if let slot, !object.values.isEmpty, group.loadedSlots.contains(slot) { return }
        var members = group.ids.compactMap { id in registered(id).flatMap { $0.fault === group ? $0 : nil } }
        if !members.contains(where: { $0 === object }) { members.append(object) }
        // Members that held no to-one reference yet (a fault's group loaded no slot) may turn
        // out to have left an owner whose loaded to-many list holds them
        // (`noteMovedReferences`): a new generation before the read, so that what `.prefetch`
        // loads with them stays current.
        let movesUnknown = members.contains { member in member.entity.toOneSlots.contains { !group.loadedSlots.contains($0) } }
        if movesUnknown { generation += 1 }
        do {
            let rows = try read { session in
                var reader = RowReader(session: session, context: self)
                let rows = try reader.rows(for: members.map(\.objectID))
                try loadPrefetch(group.prefetch, from: members.compactMap { member in rows[member.objectID].map { (member.objectID, $0) } }, reader: &reader)
                return rows
            }
            for member in members {
                member.fault = nil
                if let row = rows[member.objectID] {
                    if !movesUnknown { noteMovedReferences(member.entity, from: member.values, to: row.values) }
                    member.values = row.values
                } else {
                    let defaults = member.entity.defaults
                    if member.values.isEmpty {
                        member.values = defaults
                    } else {
                        for slot in member.values.indices where !group.loadedSlots.contains(slot) { member.values[slot] = defaults[slot] }
                    }
                    member.state = .deleted
                    unregister(member.objectID)
                    keepDeletion(member)
                }
            }
        } catch {
            // The object stays a fault, so its next use tries again; meanwhile it reads defaults,
            // and an update context will not commit what was done with them.
            accessorFailed(error)
            if object.values.isEmpty { object.values = object.entity.defaults }
        }
    }

    // MARK: - Prefetching

    /// The relationship paths of `keys` (`"friend"`, `"pets"`, `"friend.pets"`), checked
    /// against `entity`.
    func prefetchPaths(_ keys: [String], in entity: ResolvedEntity) throws -> [[Property]] {
        try keys.map { key in
            var current = entity
            var path: [Property] = []
            for name in key.split(separator: ".", omittingEmptySubsequences: false).map(String.init) {
                guard let property = current.property(named: name) else {
                    throw QueryError(.unknownKey, ".prefetch([\"\(key)\"]): \(current.name) has no relationship '\(name)'.", key: key, entity: entity.name)
                }
                guard property.isRelationship, let destination = property.destination else {
                    throw QueryError(.unsupported, ".prefetch([\"\(key)\"]): \(current.name).\(name) is an attribute; prefetch names relationships (attributes always load with the object).", key: key, entity: entity.name)
                }
                path.append(property)
                current = destination
            }
            return path
        }
    }

    /// Reads ahead the objects `paths` lead to from `sources`, within the fetch's read: rows of
    /// objects not registered go to the prefetch cache, to-many memberships to each registered
    /// owner's relationship cache, so following them later runs no statement.
    func loadPrefetch(_ paths: [[Property]], from sources: [(ObjectID, ObjectRow)], reader: inout RowReader) throws {
        guard !paths.isEmpty, !sources.isEmpty else { return }
        if prefetched.generation != generation { prefetched = PrefetchCache(generation: generation) }
        for path in paths {
            var level = sources
            for property in path {
                let targets: [ObjectID]
                if property.isToMany {
                    let members = try reader.members(of: level.map(\.0), property)
                    for (owner, ids) in members {
                        if let object = registered(owner) {
                            object.toManyCache[property.slot] = (Set(ids), generation)
                        } else {
                            prefetched.members[owner, default: [:]][property.slot] = Set(ids)
                        }
                    }
                    targets = Array(Set(members.values.joined()))
                } else {
                    guard let destination = property.destination else { break }
                    let keys = Set(level.compactMap { source -> Int64? in
                        guard property.slot < source.1.values.count, case .integer(let key) = source.1.values[property.slot] else { return nil }
                        return key
                    })
                    targets = keys.map { ObjectID(rootEntity: destination.rootDescription, primaryKey: $0) }
                }
                var next: [(ObjectID, ObjectRow)] = []
                var unread: [ObjectID] = []
                for id in targets {
                    if let object = registered(id), object.fault == nil {
                        next.append((id, ObjectRow(entity: object.entity, values: object.values)))
                    } else if let row = prefetched.rows[id] {
                        next.append((id, row))
                    } else {
                        unread.append(id)
                    }
                }
                for (id, row) in try reader.rows(for: unread) {
                    if let fault = registered(id), fault.state == .clean {
                        // A registered fault simply gets its values.
                        fault.values = row.values
                        fault.fault = nil
                    } else {
                        prefetched.rows[id] = row
                    }
                    next.append((id, row))
                }
                level = next
            }
        }
    }

    /// A row read ahead by `.prefetch` for `id`, if it is still current.
    func prefetchedRow(_ id: ObjectID) -> ObjectRow? {
        guard prefetched.generation == generation else { return nil }
        return prefetched.rows[id]
    }

    /// The members of `owner`'s to-many relationship at `slot` read ahead by `.prefetch`, if
    /// still current.
    func prefetchedMembers(_ owner: ObjectID, slot: Int) -> Set<ObjectID>? {
        guard prefetched.generation == generation else { return nil }
        return prefetched.members[owner]?[slot]
    }
}

/// Rows and to-many memberships `.prefetch` read for objects not registered yet; valid while
/// the context's generation stays `generation`, replaced by the next fetch that prefetches.
struct PrefetchCache {
    var generation: Int
    var rows: [ObjectID: ObjectRow] = [:]
    var members: [ObjectID: [Int: Set<ObjectID>]] = [:]
}
