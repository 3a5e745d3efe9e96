import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// The handle an update block receives: create, fetch, change, delete, then `commit()`.
///
/// For example:
///
/// ```swift
/// try world.beginUpdateAndWait { update in
///     let farmer = try update.create(Person.self)
///     farmer.name = "Farmer"
///     let knight = try update.fetchOrCreate(Person.self, %"name" == "Knight" && %"age" == 18)
///     knight.friend = farmer
///     try update.commit()
/// }
/// ```
///
/// Use an `Update` only inside the block it was handed to, or inside `update.perform { }`
/// continuations; objects it returns belong to its context. Reads see the update's own
/// uncommitted changes: objects created in it, changed values, deletions.
public struct Update: Sendable {
    let context: UpdateContext

    var core: ContextCore { context.core }

    // MARK: Creating

    /// A new object of `type`, with its permanent ID and default values.
    @discardableResult
    public func create<T: ManagedObject>(_ type: T.Type) throws -> T {
        core.checkExecution("update.create(\(T.self).self)")
        return try core.create(core.graph.entity(for: type)) as! T
    }

    /// The first object matching `condition`, or a new one with the condition's `==` values.
    ///
    /// The condition must be `key == constant` terms joined by `&&`
    /// (`%"name" == "Knight" && %"age" == 18`); anything else throws
    /// `QueryError.Code.invalidFetchOrCreate` before anything is fetched or created.
    public func fetchOrCreate<T: ManagedObject>(_ type: T.Type, _ condition: Condition) throws -> T {
        core.checkExecution("update.fetchOrCreate(\(T.self).self, …)")
        let entity = core.graph.entity(for: type)
        // Compiling checks every key and value type first; the read below uses it.
        let query = try core.compile(type, condition, nil)
        let assignments = try FetchOrCreate.assignments(of: condition, in: entity)
        let pinned = Self.pinnedConstraints(of: entity, assignments)
        if let (constraint, values) = pinned.first {
            // A look-up, not a fetch that evaluates every pending object: imports of many
            // objects by unique key in one update stay linear.
            if let existing = try core.uniqueMatch(type, condition, compiled: query, entity: entity, constraint: constraint,
                                                   values: values, assignments: assignments) {
                return existing
            }
        } else if let existing = try core.fetchFirst(type, condition, orderBy: nil, options: FetchOptions(), compiled: query) {
            return existing
        }
        // Relationship targets must exist: check them before anything is created.
        var targets: [Int: ManagedObject] = [:]
        for (slot, value) in assignments {
            let property = entity.properties[slot]
            guard let id = property.destinationID(of: value) else { continue }
            guard let target = try core.object(for: id) else {
                throw QueryError(.objectNotFound, "fetchOrCreate(\(entity.name).self, …): \(id) does not exist, so '\(property.name)' cannot point at it.", key: property.name, entity: entity.name)
            }
            // An object of the destination's table is not always of the destination: a sibling
            // sub-entity shares its root.
            guard core.canRelate(target, through: property) else {
                throw QueryError(.typeMismatch, "fetchOrCreate(\(entity.name).self, …): '\(property.name)' points at \(property.destination?.name ?? "?") objects, and \(id) is a \(Swift.type(of: target)).", key: property.name, entity: entity.name)
            }
            targets[slot] = target
        }
        let claims = pinned.isEmpty ? nil : pinned.map { UniqueClaim(index: $0.0.indexName, entity: entity.name, values: $0.1) }
        let object = try core.create(entity, id: try claims.map { try claimedID(for: entity, $0) })
        if claims != nil { core.upserts[object.objectID] = (assignments.map(\.0), assignments.map(\.1)) }
        for (slot, value) in assignments {
            if let target = targets[slot] {
                // Through the relationship setter, so the inverse side learns of it too.
                core.setToOne(of: object, slot: slot, to: target)
            } else {
                object.values[slot] = value
            }
        }
        return object as! T
    }

    /// The uniqueness constraints whose keys all have non-nil `==` values in a `fetchOrCreate`
    /// condition, with those values: what it looks up by, and claims for the object it makes.
    private static func pinnedConstraints(of entity: ResolvedEntity, _ assignments: [(Int, Value)]) -> [(UniqueConstraint, [Value])] {
        guard !entity.uniqueConstraints.isEmpty else { return [] }
        var values = ContiguousArray<Value>(repeating: .null, count: entity.defaults.count)
        for (slot, value) in assignments where slot < values.count { values[slot] = value }
        return entity.uniqueConstraints.compactMap { constraint in constraint.key(in: values).map { (constraint, $0) } }
    }

    /// The ID for an object `fetchOrCreate` makes: the one a concurrent `fetchOrCreate` of the
    /// same unique values chose, so both make the same object (see `ObjectStore.claim`).
    private func claimedID(for entity: ResolvedEntity, _ claims: [UniqueClaim]) throws -> ObjectID {
        let proposed = ObjectID(rootEntity: entity.rootDescription, primaryKey: try core.store.reserveKey(for: entity.rootDescription))
        let id = core.store.claim(claims, proposed: proposed)
        // This context already holds that object, or made it and deleted it (the registry may
        // have let go of it since): make a new one.
        return core.registered(id) == nil && !core.deletedInserts.contains(id) ? id : proposed
    }

    // MARK: Reading

    /// The first object matching `condition` in `orderBy` order, or `nil`.
    public func fetch<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil,
                                        options: FetchOptions = FetchOptions()) throws -> T? {
        try core.fetchFirst(type, condition, orderBy: orderBy, options: options)
    }

    /// Every object matching `condition`, in `orderBy` order, windowed by `options`.
    public func fetchAll<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil,
                                           options: FetchOptions = FetchOptions()) throws -> [T] {
        try core.fetchAll(type, condition, orderBy: orderBy, options: options)
    }

    /// A cursor over the objects matching `condition`, loading them `.batch(n)` at a time
    /// (1000 by default): walking millions of objects keeps memory flat.
    ///
    /// For example:
    ///
    /// ```swift
    /// var people = try world.fetchCursor(Person.self, orderBy: .ascending("name"), options: .batch(500))
    /// while let person = try people.next() { print(person.name) }
    /// ```
    public func fetchCursor<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil,
                                              options: FetchOptions = FetchOptions()) throws -> FetchCursor<T> {
        try core.fetchCursor(type, condition, orderBy: orderBy, options: options)
    }

    /// How many objects match `condition`.
    public func fetchCount<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil) throws -> Int {
        try core.fetchCount(type, condition)
    }

    /// The IDs of the objects matching `condition`, without materializing them.
    public func fetchIDs<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil,
                                           options: FetchOptions = FetchOptions()) throws -> [ObjectID] {
        try core.fetchIDs(type, condition, orderBy: orderBy, options: options)
    }

    /// The object with `id`, or `nil` when there is none (or it is deleted).
    public func fetch<T: ManagedObject>(_ type: T.Type, id: ObjectID) throws -> T? {
        try core.fetch(type, id: id)
    }

    /// This update's copy of an object from another context (the main context, say).
    ///
    /// - Throws: `QueryError.Code.objectNotFound` when the object no longer exists.
    public func use<T: ManagedObject>(_ object: T) throws -> T {
        core.checkExecution("update.use(_:)")
        if object.context === core { return object }
        guard let mine = try core.object(for: object.objectID) as? T else {
            throw QueryError(.objectNotFound, "\(object.objectID) no longer exists: it was deleted.", entity: object.objectID.entityName)
        }
        return mine
    }

    // MARK: Deleting

    /// Deletes `object`, applying the delete rules of its relationships.
    ///
    /// - Throws: an error of the store when a read the rules need fails (the objects a
    ///   `.cascade` takes, say). The object stays marked deleted with its rules applied in
    ///   part, so the update's `commit()` throws the same error until you roll it back.
    public func delete(_ object: ManagedObject) throws {
        core.checkExecution("update.delete(_:)")
        guard object.context === core else {
            preconditionFailure("\(object) belongs to another context: delete this update's copy — try update.delete(update.use(object)).")
        }
        try core.delete(object)
    }

    /// Deletes every object matching `condition` in this context; returns how many.
    @discardableResult
    public func deleteAll<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil) throws -> Int {
        let objects = try core.fetchAll(type, condition, orderBy: nil, options: FetchOptions())
        for object in objects { try core.delete(object) }
        return objects.count
    }

    // MARK: Saving

    /// Saves the update's changes into its target. Nothing is saved without it.
    ///
    /// - Throws: `SaveError` (a `.deny` rule, say); the changes stay pending then.
    public func commit() throws {
        try context.commit()
    }

    /// Forgets every uncommitted change of this update.
    public func rollback() {
        core.checkExecution("update.rollback()")
        core.rollback()
    }

    /// Continues this update later (from a callback, say), in the same context.
    public func perform(_ block: @escaping @Sendable (Update) throws -> Void) {
        context.perform(block)
    }
}

/// The `==` terms of a `fetchOrCreate` condition, as slot values for the new object.
enum FetchOrCreate {
    /// The `key == constant` terms of `condition`, which the caller has compiled (checking
    /// every key and value type).
    static func assignments(of condition: Condition, in entity: ResolvedEntity) throws(QueryError) -> [(Int, Value)] {
        var result: [(Int, Value)] = []
        func collect(_ node: Condition.Node) throws(QueryError) {
            switch node {
            case .and:
                for operand in node.chain() { try collect(operand) }
            case .compare(let key, .equal, let operand):
                guard let property = entity.property(named: key), property.isStored else { throw invalid() }
                switch operand {
                case .value(let value, _):
                    // As the attribute stores it, or `.typeMismatch` when it cannot hold the
                    // value, as for batch updates: stored, `Int16(truncatingIfNeeded:)`, `2` as
                    // `true` or `nil` as `""` would read back as another value, which the same
                    // condition would then not find.
                    result.append((property.slot, try BatchValues.normalize(value, for: property, in: entity)))
                case .object(let id):
                    result.append((property.slot, .integer(id.primaryKey)))
                case .key:
                    throw invalid()
                }
            case .invalid(let error):
                throw error
            default:
                throw invalid()
            }
        }
        func invalid() -> QueryError {
            QueryError(.invalidFetchOrCreate, "fetchOrCreate(\(entity.name).self, \(condition)) needs `key == constant` terms joined by && (keys of \(entity.name) itself), to know what to create.", entity: entity.name)
        }
        try collect(condition.node)
        return result
    }
}
