import Foundation
import _ContextStackCore

/// Relationship upkeep: to-one and to-many reads, setting either side, inverses kept in sync
/// at once, one-to-one partners letting go, join-table pairs recorded for the commit.
extension ContextCore {
    /// This context's uncommitted join-table changes of one table.
    func pendingLinks(in table: String) -> [LinkKey: Bool] {
        links.filter { $0.key.table == table }
    }

    func foreignKey(_ object: ManagedObject, _ property: Property) -> ObjectID? {
        if object.fault != nil { fulfill(object, slot: property.slot) }
        return property.destinationID(of: object.values[property.slot])
    }

    /// The object a to-one relationship points at.
    func toOne(of object: ManagedObject, slot: Int) -> ManagedObject? {
        guard let id = foreignKey(object, object.entity.properties[slot]) else { return nil }
        do {
            return try self.object(for: id)
        } catch {
            accessorFailed(error)
            return nil
        }
    }

    /// Records an error met inside a property accessor, which cannot throw: it goes to
    /// `stack.onError`, and an update context refuses its next commit with it.
    func accessorFailed(_ error: any Error) {
        host.report(error)
        refuseCommits(with: error)
    }

    /// Makes an update context refuse its commits with `error` (the first such one) until it
    /// is rolled back: what it changed may be incomplete.
    func refuseCommits(with error: any Error) {
        if isUpdate && accessorFailure == nil { accessorFailure = error }
    }

    /// The IDs a to-many relationship holds, loaded once and kept in sync afterwards.
    func toManyIDs(of object: ManagedObject, _ property: Property) throws -> Set<ObjectID> {
        if let cached = object.toManyCache[property.slot], cached.generation == generation {
            return cached.ids
        }
        if let ids = prefetchedMembers(object.objectID, slot: property.slot) {
            object.toManyCache[property.slot] = (ids, generation)
            return ids
        }
        // The same member resolution quantifiers and counts use: store, pending commits,
        // pinned view and this context's own changes.
        let ids = Set(try read { session in
            var reader = RowReader(session: session, context: self)
            return try reader.members(of: object.objectID, property)
        })
        object.toManyCache[property.slot] = (ids, generation)
        return ids
    }

    /// The objects a to-many relationship holds.
    func toMany(of object: ManagedObject, slot: Int) -> [ManagedObject] {
        do {
            return try objects(for: Array(try toManyIDs(of: object, object.entity.properties[slot])))
        } catch {
            accessorFailed(error)
            return []
        }
    }

    func updateCache(_ object: ManagedObject, _ property: Property, _ change: (inout Set<ObjectID>) -> Void) {
        guard var cached = object.toManyCache[property.slot], cached.generation == generation else {
            forgetPrefetchedMembers(of: object.objectID, property)
            return
        }
        change(&cached.ids)
        object.toManyCache[property.slot] = cached
    }

    /// Drops the members of `owner`'s to-many `property` that `.prefetch` read ahead, which a
    /// change of the relationship just made out of date: read when next asked for, they
    /// include this context's changes.
    func forgetPrefetchedMembers(of owner: ObjectID, _ property: Property) {
        guard !prefetched.members.isEmpty else { return }
        prefetched.members[owner]?[property.slot] = nil
    }

    /// Points a to-one relationship at `target`, keeping the inverse side in sync.
    package func setToOne(of object: ManagedObject, slot: Int, to target: ManagedObject?) {
        let property = object.entity.properties[slot]
        if let target, !checkRelatable(object, target, property) { return }
        link(object, property, to: target)
    }

    func link(_ object: ManagedObject, _ property: Property, to target: ManagedObject?) {
        // Reading a key may fire a fault that finds the row gone: a change of that object is
        // refused, before anything is changed.
        let oldID = foreignKey(object, property)
        guard !refusedAsFoundDeleted(object), oldID != target?.objectID else { return }
        var targetsPartner: ObjectID?
        if let target, let inverse = property.inverse, !inverse.isToMany {
            targetsPartner = foreignKey(target, inverse)
            guard !refusedAsFoundDeleted(target) else { return }
        } else if let target, target.fault != nil {
            // No key of the target's is read for the link: its fault fires now, so that a row
            // another context deleted is found before a reference to it is made, which the
            // writer would refuse with the whole commit.
            fulfill(target, slot: nil)
            guard !refusedAsFoundDeleted(target) else { return }
        }
        markChanged(object)
        object.values[property.slot] = target.map { .integer($0.objectID.primaryKey) } ?? .null
        guard let inverse = property.inverse else { return }
        if let oldID {
            if inverse.isToMany {
                if let old = registered(oldID) {
                    touchedRelationships.insert(oldID)
                    updateCache(old, inverse) { $0.remove(object.objectID) }
                } else {
                    forgetPrefetchedMembers(of: oldID, inverse)
                }
            } else if let old = loadPartner(oldID), foreignKey(old, inverse) == object.objectID {
                markChanged(old)
                old.values[inverse.slot] = .null
            }
        }
        guard let target else { return }
        if inverse.isToMany {
            touchedRelationships.insert(target.objectID)
            updateCache(target, inverse) { $0.insert(object.objectID) }
        } else {
            // One-to-one: the target's previous partner lets go of it.
            if let previousID = targetsPartner, previousID != object.objectID,
               let previous = loadPartner(previousID) {
                markChanged(previous)
                previous.values[property.slot] = .null
            }
            markChanged(target)
            target.values[inverse.slot] = .integer(object.objectID.primaryKey)
        }
    }

    /// The one-to-one partner with `id` whose side of the link must change too, or `nil` when
    /// it is gone. A failed read is an accessor failure: the partner would keep pointing here.
    func loadPartner(_ id: ObjectID) -> ManagedObject? {
        do {
            return try object(for: id)
        } catch {
            accessorFailed(error)
            return nil
        }
    }

    /// Makes a to-many relationship hold exactly `targets`, keeping inverses in sync.
    func setToMany(of object: ManagedObject, slot: Int, to targets: [ManagedObject]) {
        let property = object.entity.properties[slot]
        // Every target is checked (a misuse traps whichever it is); one found deleted refuses
        // the whole change.
        var refused = false
        for target in targets where !checkRelatable(object, target, property) { refused = true }
        guard !refused else { return }
        do {
            try replaceMembers(object, property, with: targets)
        } catch {
            accessorFailed(error)
        }
    }

    func replaceMembers(_ object: ManagedObject, _ property: Property, with targets: [ManagedObject]) throws {
        let current = try toManyIDs(of: object, property)
        let wanted = Set(targets.map(\.objectID))
        let removed = current.subtracting(wanted)
        let added = targets.filter { !current.contains($0.objectID) }
        switch property.storage {
        case .inverseColumn:
            guard let inverse = property.inverse else { break }
            // The added members' keys first: one whose fault finds its row gone refuses the
            // change before any of it is made.
            var refused = false
            for member in added where member.fault != nil {
                _ = foreignKey(member, inverse)
                if refusedAsFoundDeleted(member) { refused = true }
            }
            guard !refused else { return }
            for member in try objects(for: Array(removed)) where foreignKey(member, inverse) == object.objectID {
                markChanged(member)
                member.values[inverse.slot] = .null
            }
            for member in added { link(member, inverse, to: object) }
        case .joinTable:
            guard let join = property.joinTable else { break }
            // `member`: the other object, when this context holds it (an added one always is).
            func record(_ other: ObjectID, _ member: ManagedObject?, present: Bool) {
                let key = property.linkKey(join, owner: object.objectID.primaryKey, member: other.primaryKey)
                links[key] = present
                linkEnds[key] = property.linkEnds(owner: object.objectID, member: other,
                                                  ownerEntity: object.entity.description_, memberEntity: member?.entity.description_)
                if let inverse = property.inverse {
                    if let member {
                        touchedRelationships.insert(member.objectID)
                        updateCache(member, inverse) { ids in
                            if present { ids.insert(object.objectID) } else { ids.remove(object.objectID) }
                        }
                    } else {
                        forgetPrefetchedMembers(of: other, inverse)
                    }
                }
            }
            removed.forEach { record($0, registered($0), present: false) }
            added.forEach { record($0.objectID, $0, present: true) }
        case .column:
            break
        }
        object.toManyCache[property.slot] = (wanted, generation)
    }
}
