import _ContextStackCore

/// An update's pending objects (inserted or changed, not yet committed) by their values of
/// each uniqueness constraint, for `fetchOrCreate`: so that finding the pending object that
/// holds a unique value costs a look-up, not an evaluation of every pending object. Without
/// it, an import of N objects by `fetchOrCreate` in one update is quadratic (CoreStore #502:
/// 1–2 s became 4–5 minutes).
///
/// Property setters write into objects without telling anyone which value changed; they do
/// tell the context that the object changes (`ContextCore.markChanged`). So the index is
/// kept lazily: the context notes every object that may have changed since the last look-up
/// (`touched`), and a look-up files those again under their current values first. Between
/// look-ups, any number of writes cost one array append each.
struct PendingUniqueIndex {
    /// A constraint's values in one object, as the hash of the constraint and the values:
    /// the index files IDs under it, and a look-up checks each ID it finds against the
    /// object's current values. Keys of values (the texts of an import, say) lie elsewhere
    /// in memory: a table of them compared texts along every probe (most look-ups of an
    /// import find nothing, and probe several), read them again to rehash as it grew, and
    /// released every one when the update committed, each a cache miss. That was most of
    /// `fetchOrCreate`'s look-up in the index (upsert, 2026-11-27).
    private static func digest(_ constraint: UniqueConstraint, _ values: some Sequence<Value>) -> Int {
        var hasher = Hasher()
        hasher.combine(ObjectIdentifier(constraint))
        for value in values { hasher.combine(value) }
        return hasher.finalize()
    }

    /// `constraint`'s digest in a row of `values`; `nil` when one of them is NULL.
    private static func digest(_ constraint: UniqueConstraint, in values: ContiguousArray<Value>) -> Int? {
        var hasher = Hasher()
        hasher.combine(ObjectIdentifier(constraint))
        for slot in constraint.slots {
            let value = values[slot]
            if value.isNull { return nil }
            hasher.combine(value)
        }
        return hasher.finalize()
    }

    /// What is filed under one key, or the keys one object is filed under: one, far more
    /// often than not (two pending objects with one key fail their commit unless one changes).
    fileprivate enum OneOrMore<Element> {
        case one(Element)
        case many([Element])

        var all: [Element] {
            switch self {
            case .one(let element): [element]
            case .many(let elements): elements
            }
        }

        func adding(_ element: Element) -> OneOrMore {
            .many(all + [element])
        }
    }

    /// The bits of a digest the index files under: all of them, except in a test that makes
    /// every key collide (none) to check that a look-up judges what it finds by the object's
    /// values — which `Hasher`, seeded anew in every process, never lets a test force.
    private let digestMask: Int

    private var objects: [Int: OneOrMore<ObjectID>] = [:]
    /// The keys each object is filed under, to take it out when it changes.
    private var keys: [ObjectID: OneOrMore<Int>] = [:]
    /// Objects that may have changed since they were last filed.
    private(set) var touched: [ManagedObject] = []

    /// Notes that `object` may be about to change. Setting several properties of one object
    /// in a row notes it once.
    mutating func touch(_ object: ManagedObject) {
        if touched.last !== object { touched.append(object) }
    }

    /// Files every pending object of `changed`; `digestBits` is for tests only (see
    /// `digestMask`).
    init(_ changed: [ObjectID: ManagedObject], digestBits: Int = Int.bitWidth) {
        digestMask = digestBits >= Int.bitWidth ? -1 : (1 << digestBits) - 1
        for object in changed.values where object.state != .deleted {
            if let filed = keys(of: object) { file(object.objectID, under: filed) }
        }
    }

    /// The first pending object whose values of `constraint` are `values`, as of now, that
    /// `matches`.
    mutating func first(_ constraint: UniqueConstraint, _ values: [Value], pending changed: [ObjectID: ManagedObject],
                        where matches: (ManagedObject) -> Bool) -> ManagedObject? {
        if !touched.isEmpty {
            let refiling = touched
            touched.removeAll(keepingCapacity: true)
            for object in refiling {
                let current = object.state != .deleted && changed[object.objectID] === object ? keys(of: object) : nil
                let filed = keys[object.objectID]
                guard current != filed else { continue }
                if let filed { unfile(object.objectID, from: filed) }
                if let current { file(object.objectID, under: current) }
            }
        }
        // No object is filed under a NULL: a key with one matches none.
        guard values.count == constraint.slots.count, !values.contains(where: \.isNull) else { return nil }
        func holding(_ id: ObjectID) -> ManagedObject? {
            guard let object = changed[id] else { return nil }
            for (slot, value) in zip(constraint.slots, values) where object.values[slot] != value { return nil }
            return matches(object) ? object : nil
        }
        switch objects[Self.digest(constraint, values) & digestMask] {
        case nil: return nil
        case .one(let id): return holding(id)
        case .many(let ids):
            for id in ids { if let object = holding(id) { return object } }
            return nil
        }
    }

    /// The keys `object` belongs under now: one per constraint whose values it all holds.
    private func keys(of object: ManagedObject) -> OneOrMore<Int>? {
        let constraints = object.entity.uniqueConstraints
        if constraints.count == 1 { return Self.digest(constraints[0], in: object.values).map { .one($0 & digestMask) } }
        let all = constraints.compactMap { Self.digest($0, in: object.values).map { $0 & digestMask } }
        return all.isEmpty ? nil : all.count == 1 ? .one(all[0]) : .many(all)
    }

    private mutating func file(_ id: ObjectID, under filed: OneOrMore<Int>) {
        func add(_ key: Int) {
            if let present = objects[key] { objects[key] = present.adding(id) } else { objects[key] = .one(id) }
        }
        switch filed {
        case .one(let key): add(key)
        case .many(let all): all.forEach(add)
        }
        keys[id] = filed
    }

    private mutating func unfile(_ id: ObjectID, from filed: OneOrMore<Int>) {
        keys[id] = nil
        for key in filed.all {
            let rest = (objects[key]?.all ?? []).filter { $0 != id }
            objects[key] = rest.isEmpty ? nil : rest.count == 1 ? .one(rest[0]) : .many(rest)
        }
    }
}

extension ContextCore {
    /// The object `fetchOrCreate` finds for `condition` when the condition pins the values of
    /// `constraint`, as `fetchFirst` would find it, without evaluating every pending object:
    /// a stored row (or one queued in the store) matching the condition whose object this
    /// update has not changed, else a pending object holding `values` (through the index)
    /// whose assigned values all match. A stored row this update changed is judged by its
    /// current values, through the index, like any pending object.
    ///
    /// `query`: `condition` compiled (`compile(type, condition, nil)`), which `fetchOrCreate`
    /// needs anyway to check the condition's keys and values.
    package func uniqueMatch<T: ManagedObject>(_ type: T.Type, _ condition: Condition, compiled query: CompiledQuery, entity: ResolvedEntity,
                                               constraint: UniqueConstraint, values: [Value], assignments: [(Int, Value)]) throws -> T? {
        // The stored rows come whole, with their objects, in one read (their IDs first and then
        // each object by ID took two). A row whose object this update changed is left for the
        // index below, which judges it by its current values.
        beginRead()
        defer { endRead() }
        let stored = try fetchObjects(type, FetchRequest(condition: condition, orderBy: nil, options: .noPendingChanges), compiled: query)
        if let object = stored.first(where: { changed[$0.objectID] == nil }) { return object }
        if pendingUnique == nil { pendingUnique = PendingUniqueIndex(changed) }
        let pending = changed
        return pendingUnique!.first(constraint, values, pending: pending) { object in
            entity.includes(object.entity) && object.state != .deleted && pending[object.objectID] === object
                && object is T && assignments.allSatisfy { object.values[$0.0] == $0.1 }
        } as? T
    }
}

/// Two filings of an object are the same keys when `==`: `keys(of:)` never makes `.many` of one.
extension PendingUniqueIndex.OneOrMore: Equatable where Element: Equatable {}
