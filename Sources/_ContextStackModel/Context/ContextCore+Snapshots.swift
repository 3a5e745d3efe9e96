import _ContextStackCore

/// Snapshots taken from objects, and snapshots written back into them.
extension ContextCore {
    /// The slots of `object` as its context sees them (pending changes included), with its
    /// to-many members, for `S(object)`.
    package func snapshotRow(of object: ManagedObject) -> _SnapshotRow {
        checkRead(object)
        var members: [Int: [ObjectID]] = [:]
        for property in object.entity.properties where property.isToMany {
            do {
                members[property.slot] = try toManyIDs(of: object, property).sorted()
            } catch {
                accessorFailed(error)
                members[property.slot] = []
            }
        }
        return _SnapshotRow(id: object.objectID, entity: object.entity, values: object.values, members: members)
    }

    /// Sets the object `snapshot` was taken from to the snapshot's values: attributes, to-one
    /// and to-many relationships. With `original`, first checks that the object's values as
    /// loaded still equal `original`'s, and makes the commit check again, at the moment it is
    /// saved, that the stored row is still as loaded.
    ///
    /// - Throws: `MergeConflictError` when the object no longer exists, when a relationship
    ///   names an object that no longer exists (or is of another sub-entity than the
    ///   relationship's destination), or, with `original`, when a stored value differs from it.
    package func apply<S: EntitySnapshot>(_ snapshot: S, expecting original: S?) throws {
        checkExecution("apply(_:)")
        if let original {
            precondition(original.id == snapshot.id, "apply(\(snapshot.id), expecting: \(original.id)): the expected snapshot must be of the same object — pass the snapshot the client read before editing it.")
        }
        let entity = graph.entity(for: S.Entity.self)
        beginRead()
        defer { endRead() }
        guard snapshot.id.rootEntity === entity.rootDescription,
              let object = try object(for: snapshot.id), entity.includes(object.entity) else {
            throw MergeConflictError.deleted(snapshot.id, explanation: MergeConflictError.appliedExpecting)
        }
        checkRead(object)
        // A fault fires here, not halfway through: its row may turn out gone.
        if object.fault != nil { fulfill(object, slot: nil) }
        if object.state == .deleted {
            throw MergeConflictError.deleted(snapshot.id, explanation: MergeConflictError.appliedExpecting)
        }
        let blank = ContiguousArray<Value>(repeating: .null, count: object.entity.properties.count)
        var ours = _SnapshotRow(id: object.objectID, entity: object.entity, values: blank, members: [:])
        snapshot._cs_write(to: &ours)
        if let original {
            var expected = _SnapshotRow(id: object.objectID, entity: object.entity, values: blank, members: [:])
            original._cs_write(to: &expected)
            try check(object, against: expected, ours: ours)
        }
        // Every related object is found before anything changes, so a failed apply leaves the
        // object as it was.
        var changes: [(slot: Int, change: SnapshotChange)] = []
        // With `original`, the commit checks again the rows this changes: the object's, and
        // those of the objects a relationship change moves — a one-to-many membership is the
        // member's row, and a one-to-one change can clear another object's. (A many-to-many
        // membership is a join-table pair, which has no row to compare: it is checked once,
        // above. Its members are marked all the same, and checked if their rows change.)
        var moved: [ObjectID] = []
        for slot in ours.written {
            let property = object.entity.properties[slot]
            if property.isToMany {
                let ids = ours.members[slot] ?? []
                // An object of another sub-entity of the destination's root (an ID decodes by
                // its root) is no object of the destination: missing, as one that is gone.
                let targets = try objects(for: ids).filter { canRelate($0, through: property) }
                let found = Set(targets.map(\.objectID))
                let missing = Set(ids).subtracting(found)
                if !missing.isEmpty {
                    throw MergeConflictError(conflicts: missing.sorted().map {
                        .init(objectID: object.objectID, key: property.name, snapshot: .null, stored: .null, ours: .text($0.description))
                    }, explanation: MergeConflictError.appliedExpecting)
                }
                let members = try toManyIDs(of: object, property)
                if found != members {
                    changes.append((slot, .toMany(targets)))
                    if original != nil { moved += members.symmetricDifference(found) }
                }
            } else if property.isRelationship {
                var target: ManagedObject?
                if case .integer(let key) = ours.values[slot], let destination = property.destination {
                    let id = ObjectID(rootEntity: destination.rootDescription, primaryKey: key)
                    guard let found = try self.object(for: id), canRelate(found, through: property) else {
                        throw MergeConflictError(conflicts: [.init(objectID: object.objectID, key: property.name, snapshot: .null,
                                                                   stored: .null, ours: .text(id.description))],
                                                 explanation: MergeConflictError.appliedExpecting)
                    }
                    target = found
                }
                if foreignKey(object, property) != target?.objectID { changes.append((slot, .toOne(target))) }
            } else if !Self.asRead(object.values[slot], property, object.entity).isIdentical(to: ours.values[slot]) {
                // A value the snapshot read as it is is not a change, whatever form it is stored in.
                changes.append((slot, .value(ours.values[slot])))
            }
        }
        // Only a relationship change can change other rows (attributes never do): the changed
        // objects are listed only then, an apply of many attributes in one update stays linear.
        let movesOthers = original != nil && changes.contains { if case .value = $0.change { false } else { true } }
        let changedBefore = movesOthers ? Set(changed.keys) : []
        for (slot, change) in changes {
            guard willChange(object) else { return }
            switch change {
            case .value(let value): object.values[slot] = value
            case .toOne(let target): setToOne(of: object, slot: slot, to: target)
            case .toMany(let targets): setToMany(of: object, slot: slot, to: targets)
            }
        }
        if original != nil {
            expectsStoredRow.insert(object.objectID)
            expectsStoredRow.formUnion(moved)
            if movesOthers {
                for id in changed.keys where !changedBefore.contains(id) { expectsStoredRow.insert(id) }
            }
        }
    }

    /// Throws `MergeConflictError` for every slot `expected` holds whose value as loaded (before
    /// this update changed it) differs.
    private func check(_ object: ManagedObject, against expected: _SnapshotRow, ours: _SnapshotRow) throws {
        let loaded = object.beforeImage ?? object.values
        var conflicts: [MergeConflictError.Conflict] = []
        for slot in expected.written {
            let property = object.entity.properties[slot]
            if property.isToMany {
                let stored = try toManyIDs(of: object, property)
                let wanted = expected.members[slot] ?? []
                if stored != Set(wanted) {
                    conflicts.append(.init(objectID: object.objectID, key: property.name, snapshot: Self.list(wanted),
                                           stored: Self.list(stored.sorted()), ours: Self.list(ours.members[slot] ?? [])))
                }
            } else if !Self.asRead(loaded[slot], property, object.entity).isIdentical(to: expected.values[slot]) {
                // `expected` was written by a snapshot: already as read.
                conflicts.append(.init(objectID: object.objectID, key: property.name, snapshot: expected.values[slot],
                                       stored: loaded[slot], ours: ours.values[slot]))
            }
        }
        if !conflicts.isEmpty { throw MergeConflictError(conflicts: conflicts, explanation: MergeConflictError.appliedExpecting) }
    }

    /// A slot's value as a snapshot of it holds it: read through the attribute's type (the
    /// default, or `nil`, for a value that does not fit), so that a stored value in another
    /// form than ContextStack writes — `"12.50"` for a decimal, `2.0` in a `Bool` column, NULL
    /// in a non-optional one, an enum's unknown raw value, as another program may write them —
    /// equals the snapshot a
    /// client read of it. Compared as stored, such a row conflicted with every snapshot of
    /// it, and no `apply(_:expecting:)` could ever change it. Relationships as they are.
    private static func asRead(_ value: Value, _ property: Property, _ entity: ResolvedEntity) -> Value {
        guard property.isAttribute, let read = property.declared.asRead else { return value }
        if let canonical = read.read(value) { return canonical }
        return property.isOptional ? .null : entity.defaults[property.slot]
    }

    /// Members as one value for a conflict report: `"[Pet/1, Pet/2]"`.
    private static func list(_ ids: [ObjectID]) -> Value {
        .text("[" + ids.map(\.description).joined(separator: ", ") + "]")
    }
}

/// One slot `apply` sets, with everything it needs already found.
private enum SnapshotChange {
    case value(Value)
    case toOne(ManagedObject?)
    case toMany([ManagedObject])
}
