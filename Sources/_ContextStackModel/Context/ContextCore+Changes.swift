import Foundation
import _ContextStackCore

/// Deleting (with delete rules), turning an update's changes into a `ChangeSet`, and what a
/// commit, a rollback or a reset leaves behind.
extension ContextCore {
    /// Deletes `object`, applying its relationships' delete rules now (`.deny` is checked at commit).
    package func delete(_ object: ManagedObject) throws {
        try delete(object, reachedThrough: nil)
    }

    /// Deletes `object` for the app (`origin` `nil`), or because the `.cascade` rule of
    /// `origin.property` of the object `origin.parent` being deleted reached it. An object
    /// deleted only by cascades is noted with the objects and relationships that reached it
    /// (`cascaded`): the writer deletes it only if it is still related to one of them when the
    /// commit is written (`ChangeSet.cascaded`).
    private func delete(_ object: ManagedObject, reachedThrough origin: CascadeOrigin?) throws {
        checkRead(object)
        guard kind == .update else {
            preconditionFailure("\(object) belongs to a MainContext: delete it in an update — try update.delete(update.use(object)).")
        }
        guard object.state != .deleted else {
            // Deleted already: by the app, whatever reaches it now; or by cascades only, which
            // this one joins unless the app deletes it itself.
            if cascaded[object.objectID] != nil {
                if let origin { cascaded[object.objectID]!.append(origin) } else { cascaded[object.objectID] = nil }
            }
            return
        }
        markChanged(object)
        let wasInserted = object.state == .inserted
        object.state = .deleted
        if let origin, !wasInserted { cascaded[object.objectID] = [origin] }
        do {
            let cascade = try applyDeleteRules(of: object)
            if wasInserted {
                // Never stored: nothing to delete below.
                changed[object.objectID] = nil
                deletedInserts.insert(object.objectID)
                if object.entity.properties.contains(where: { $0.isRelationship && $0.deleteRule == .deny }) {
                    deletedInsertsToCheck.append(object)
                }
            }
            for (target, property) in cascade {
                // A cascade from an object this update made, or over a relationship this update
                // made, reaches what this update related: the app's own doing, kept as a
                // delete of its own.
                try delete(target, reachedThrough: wasInserted ? nil : property.map { CascadeOrigin(parent: object.objectID, property: $0) })
            }
        } catch {
            // A read the rules needed failed: the object is marked deleted and its rules ran
            // in part, which a commit would save as it is (and a second `delete` would find
            // done). As after a failed relationship read, the update's commits throw the error
            // until it is rolled back.
            refuseCommits(with: error)
            throw error
        }
    }

    /// Applies the delete rules of `object`'s relationships that clear its references
    /// (`.cascade` and `.nullify`), and returns the objects its cascades delete next, each with
    /// the relationship that reached it when the store related them as this update read them
    /// (`nil` when this update related them itself). (`.deny` is checked at commit;
    /// `.noAction` does nothing.)
    private func applyDeleteRules(of object: ManagedObject) throws -> [(ManagedObject, Property?)] {
        var cascade: [(ManagedObject, Property?)] = []
        for property in object.entity.properties where property.isRelationship {
            switch property.deleteRule {
            case .deny, .noAction:
                continue
            case .cascade:
                if property.isToMany {
                    for target in try objects(for: Array(try toManyIDs(of: object, property))) {
                        cascade.append((target, relatedAsRead(object, property, target) ? property : nil))
                    }
                } else if let id = foreignKey(object, property), let target = try self.object(for: id) {
                    cascade.append((target, relatedAsRead(object, property, target) ? property : nil))
                }
                fallthrough
            case .nullify:
                if property.isToMany {
                    try replaceMembers(object, property, with: [])
                } else {
                    link(object, property, to: nil)
                }
            }
        }
        return cascade
    }

    /// Whether `property` of `object` (stored, being deleted) relates it to `target` as the
    /// store did when this update read them — a relationship another commit may have changed
    /// since — rather than because this update related them. (What the context read of them
    /// may already disagree: `ann.pets` read before, Rex's row after another commit gave him to
    /// Bob. The relationship it followed came from the store all the same.)
    private func relatedAsRead(_ object: ManagedObject, _ property: Property, _ target: ManagedObject) -> Bool {
        switch property.storage {
        case .column:
            // `delete` marked `object` changed: its before-image is what was read.
            return object.beforeImage.map { property.destinationID(of: $0[property.slot]) == target.objectID } ?? false
        case .inverseColumn:
            guard let inverse = property.inverse, target.state != .inserted else { return false }
            return target.beforeImage.map { inverse.destinationID(of: $0[inverse.slot]) == object.objectID } ?? true
        case .joinTable:
            guard let join = property.joinTable, target.state != .inserted else { return false }
            return links[property.linkKey(join, owner: object.objectID.primaryKey, member: target.objectID.primaryKey)] != true
        }
    }

    // MARK: - Committing

    /// The change set of everything pending, after checking `.deny` rules.
    package func makeChangeSet() throws -> ChangeSet {
        if let accessorFailure { throw accessorFailure }
        var changes = ChangeSet()
        var gone = Set<ObjectID>()
        for object in changed.values where object.state == .deleted { try checkDenyRules(of: object) }
        for object in deletedInsertsToCheck { try checkDenyRules(of: object) }
        if !deletedInserts.isEmpty || !batchDeleted.isEmpty { try checkReferencesToDeletedObjects() }
        // In key order, table by table, not the dictionary's: a B-tree takes rows in key order
        // at its right edge and updates them a page at a time, where rows in hash order land all
        // over the table. With a table larger than SQLite's page cache, each of those read and
        // wrote pages back: an import of 100,000 objects made twelve times raw's `pread` and
        // `pwrite` calls. (The order is also the same from one run to the next.) The objects
        // are put in order before their rows are made, by their places in `changed`: sorting
        // the rows moved each one (an update's six references) once more, a sixth of
        // committing an update of 10,000 objects, and an array of the objects retained and
        // released each of them through its weak reference's side table, another third.
        for index in changed.keys.indicesInStoreOrder() {
            let object = changed.values[index]
            switch object.state {
            case .inserted:
                changes.inserts.append((object.objectID, ObjectRow(entity: object.entity, values: object.values)))
            case .updated:
                guard let snapshot = object.beforeImage else { continue }
                var slots: [Int] = []
                var values: [Value] = []
                for slot in object.entity.storedSlots where !object.values[slot].isIdentical(to: snapshot[slot]) {
                    slots.append(slot)
                    values.append(object.values[slot])
                }
                if !slots.isEmpty {
                    changes.updates.append(.init(id: object.objectID, entity: object.entity, slots: slots, values: values,
                                                 snapshot: snapshot, current: object.values,
                                                 expectsStoredRow: !expectsStoredRow.isEmpty && expectsStoredRow.contains(object.objectID)))
                }
            case .deleted:
                changes.deletes.append((object.objectID, object.entity))
                gone.insert(object.objectID)
                if !cascaded.isEmpty, let origins = cascaded[object.objectID] { changes.cascaded[object.objectID] = origins }
            case .clean, .invalidated:
                continue
            }
        }
        for (id, upsert) in upserts {
            guard let object = changed[id], object.state == .inserted else { continue }
            changes.upserts[id] = upsert.slots
            let uniqueSlots = object.entity.uniqueSlots
            if zip(upsert.slots, upsert.values).contains(where: { slot, value in uniqueSlots.contains(slot) && !object.values[slot].isIdentical(to: value) }) {
                changes.rekeyed.append(id)
            }
        }
        // An object this update made and then deleted left `changed` (and, once the app let
        // go of it, the registry: `deletedInserts`). So did an object a batch delete of this
        // update removed: the batch took its stored pairs with it, and takes those the update
        // added before it too.
        func isDeleted(_ id: ObjectID) -> Bool {
            gone.contains(id) || (!deletedInserts.isEmpty && deletedInserts.contains(id)) || (!batchDeleted.isEmpty && batchDeleted.contains(id))
        }
        for (key, present) in links {
            // A pair added to an object this commit deletes goes with it (a rule that does not
            // let go, `.noAction` or `.deny`, leaves it here); by ID, not by key (keys repeat
            // across tables).
            if present, let ends = linkEnds[key], isDeleted(ends.source) || isDeleted(ends.target) { continue }
            changes.links.append((key, present))
            changes.linkEnds[key] = linkEnds[key]
        }
        return changes
    }

    /// Throws `.deleteDenied` when a `.deny` relationship of the deleted `object` still
    /// relates to an object.
    private func checkDenyRules(of object: ManagedObject) throws {
        for property in object.entity.properties where property.isRelationship && property.deleteRule == .deny {
            let isEmpty = property.isToMany
                ? try objects(for: Array(try toManyIDs(of: object, property))).isEmpty
                : (try foreignKey(object, property).flatMap { try self.object(for: $0) }) == nil
            if !isEmpty {
                throw SaveError(.deleteDenied, "Cannot delete \(object): its relationship '\(property.name)' has the delete rule .deny and is not empty. Remove or delete the related objects first.", objects: [object.objectID])
            }
        }
    }

    /// Throws `.relatesToDeletedObject` when a to-one reference the commit sets points at an
    /// object that will not be stored: one this update created and then deleted (a `.noAction`
    /// rule left the reference, or a to-one without inverse, which no rule of the deleted
    /// object reaches), or one a batch delete of this update removed after the
    /// reference was made (a batch applies delete rules to stored rows, not to pending
    /// changes). The writer would fail the whole commit for it, in the background under a
    /// root. Only references the commit sets: a stored one goes out unchanged, and the writer
    /// checks only what a commit sets. (A many-to-many pair to such an object goes with it:
    /// `makeChangeSet` leaves it out.)
    private func checkReferencesToDeletedObjects() throws {
        for object in changed.values where object.state == .inserted || object.state == .updated {
            for slot in object.entity.toOneSlots {
                if object.state == .updated, let loaded = object.beforeImage, object.values[slot].isIdentical(to: loaded[slot]) { continue }
                guard let target = foreignKey(object, object.entity.properties[slot]) else { continue }
                let why: String
                if deletedInserts.contains(target) {
                    why = "this update created \(target) and then deleted it (no delete rule clears the reference: its inverse relationship's rule is .noAction, or it has none), so it is never stored"
                } else if batchDeleted.contains(target) {
                    why = "a batch delete of this update deleted \(target) after that change was made (a batch applies delete rules to stored rows, not to an update's pending changes)"
                } else {
                    continue
                }
                throw SaveError(.relatesToDeletedObject, "The commit relates \(object.objectID) to \(target) through '\(object.entity.properties[slot].name)', but \(why). Nothing of this commit is saved: clear the relationship, or delete \(object.objectID) too, and commit again.", objects: [object.objectID, target])
            }
        }
    }

    /// Empties what an update keeps of its changes until it commits or rolls back: once it has
    /// done either, or the context reset.
    private func forgetPendingChanges() {
        changed.removeAll()
        upserts.removeAll()
        pendingUnique = nil
        links.removeAll()
        linkEnds.removeAll()
        expectsStoredRow.removeAll()
        deletedInsertsToCheck.removeAll()
        deletedInserts.removeAll()
        cascaded.removeAll()
        batchDeleted.removeAll()
        touchedRelationships.removeAll()
    }

    /// After a commit: every object is clean again, deleted ones leave the context.
    package func didCommit() {
        for object in changed.values {
            switch object.state {
            case .deleted:
                registry[object.objectID] = nil
                object.beforeImage = nil
                // Should the deletion's save fail, a read that finds the row again gives back
                // this object, not a second one for its ID (`revivedDeletion`).
                keepDeletion(object, here: true)
            default:
                object.state = .clean
                object.beforeImage = nil
            }
        }
        // Objects created then deleted left `changed` at their delete; no commit saved them, and
        // they leave the context as the deleted ones above do.
        for id in deletedInserts { registry[id] = nil }
        forgetPendingChanges()
        // Rows read ahead before the commit may show what it changed, or objects it deleted
        // (which left the registry above): an update context sees no later commit that would
        // drop them.
        if !prefetched.rows.isEmpty || !prefetched.members.isEmpty { prefetched = PrefetchCache(generation: generation) }
        #if DEBUG
        checkInvariants()
        #endif
    }

    /// Forgets every uncommitted change: changed objects get their saved values back, created
    /// ones become invalid.
    package func rollback() {
        for object in changed.values {
            if let snapshot = object.beforeImage {
                object.values = snapshot
                object.beforeImage = nil
                object.state = .clean
            } else {
                object.state = .invalidated
                registry[object.objectID] = nil
            }
        }
        // Objects created then deleted left `changed` at their delete: created in the update,
        // they become invalid like the others.
        for id in deletedInserts {
            guard let object = registry.object(id) else { continue }
            object.state = .invalidated
            registry[id] = nil
        }
        accessorFailure = nil
        forgetPendingChanges()
        generation += 1
    }

    /// Drops every object: later use of them is a precondition failure.
    package func reset() {
        registry.forEachObject { $0.state = .invalidated }
        for object in changed.values { object.state = .invalidated }
        accessorFailure = nil
        registry.removeAll()
        forgetPendingChanges()
        mergedDeletions.removeAll()
        generation += 1
        // Nothing is left for handed-over commits to update, and a correction of the view let
        // go of below is not taken from here on (`handOverCorrection`).
        // The flag first, as `takeInbox` does: a commit handed over after the lock below sets
        // it again. The inbox is emptied whatever the flag said: a correction may have been
        // put in before its sender set it.
        inboxHasWork.store(false, ordering: .releasing)
        inbox.withLock { inbox in
            inbox.removeAll()
            pinEpoch.add(1, ordering: .relaxed)
        }
        if pinsView, let old = pin {
            // See the store as it is now, until the next reset.
            store.unpin(old)
            pin = makePin()
        }
    }
}

extension Swift.Collection where Element == ObjectID {
    /// The indices of the IDs in the order of the IDs (`ObjectID.<`: tables by name, then
    /// keys), sorting small tuples of ranks, keys and indices: sorting the elements themselves
    /// (an ID, an entity and a row each) moved every one a dozen times, 14 % of an import of
    /// 100,000 objects.
    func indicesInStoreOrder() -> [Index] {
        // One ID (a one-object commit) is in order: no tables, ranks or sort (1,600
        // instructions of a 95,000-instruction read-modify-write).
        if count <= 1 { return Array(indices) }
        // Each ID's table (as its rank among the tables, by name), key and index.
        var tables: [EntityDescription] = []
        var order: [(table: Int, key: Int64, index: Index)] = []
        order.reserveCapacity(count)
        var current: (entity: EntityDescription, rank: Int)?
        for index in indices {
            let objectID = self[index]
            if current?.entity !== objectID.rootEntity {
                let rank = tables.firstIndex { $0 === objectID.rootEntity } ?? tables.count
                if rank == tables.count { tables.append(objectID.rootEntity) }
                current = (objectID.rootEntity, rank)
            }
            order.append((current!.rank, objectID.primaryKey, index))
        }
        if tables.count > 1 {
            let byName = tables.indices.sorted { tables[$0].name < tables[$1].name }
            var rank = [Int](repeating: 0, count: tables.count)
            for (place, table) in byName.enumerated() { rank[table] = place }
            for position in order.indices { order[position].table = rank[order[position].table] }
        }
        order.sort { ($0.table, $0.key) < ($1.table, $1.key) }
        return order.map(\.index)
    }
}
