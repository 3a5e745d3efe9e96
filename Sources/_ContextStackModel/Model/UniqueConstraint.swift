import _ContextStackCore

/// Properties whose values together may occur only once among the rows of an entity and its
/// sub-entities: a `.unique` attribute, or a compound `@Entity(unique: [["a", "b"]])`.
///
/// A unique index backs each one. In a table shared by a hierarchy, a constraint declared
/// below the root covers only its own family (a partial index on the entity column), so a
/// sibling that happens to own a column of the same name is not constrained by it. Rows with
/// a `nil` in any of the keys never conflict (as in SQL, where NULLs are distinct).
package final class UniqueConstraint: Sendable {
    /// The entity that declares it; it applies to that entity and every entity below it.
    package let entity: ResolvedEntity
    package let keys: [String]
    package let slots: [Int]
    /// The unique index in the store.
    package let indexName: String
    /// `SELECT "Z_PK"` of the rows holding given values of the keys (bound in key order), made
    /// once: a commit with unique values runs it for each of them.
    package let selectHoldersSQL: String

    /// Made in `Model.init` once the schema is built (the tables and entity codes are known).
    init(entity: ResolvedEntity, keys: [String], slots: [Int]) {
        self.entity = entity
        self.keys = keys
        self.slots = slots
        self.indexName = "Z_\(entity.name)_unique_\(keys.joined(separator: "_"))"
        var sql = "SELECT \"Z_PK\" FROM \(entity.table.quotedName) WHERE "
            + keys.map { "\($0.quotedIdentifier) = ?" }.joined(separator: " AND ")
        if let codes = Self.entityCodes(of: entity) { sql += " AND \"Z_ENT\" IN (\(codes.map(String.init).joined(separator: ", ")))" }
        selectHoldersSQL = sql
    }

    /// `Person.email`, or `Person.(first, last)` for a compound constraint.
    package var label: String {
        keys.count == 1 ? "\(entity.name).\(keys[0])" : "\(entity.name).(\(keys.joined(separator: ", ")))"
    }

    /// The entity codes the constraint covers in a shared table, or `nil` for the whole table.
    package var entityCodes: [Int64]? { Self.entityCodes(of: entity) }

    private static func entityCodes(of entity: ResolvedEntity) -> [Int64]? {
        guard entity.table.hasEntityColumn, entity.superentity != nil else { return nil }
        return entity.family.map(\.entityCode)
    }

    /// `CREATE UNIQUE INDEX …` for the store's schema.
    package var createIndexSQL: String {
        let columns = keys.map(\.quotedIdentifier).joined(separator: ", ")
        var sql = "CREATE UNIQUE INDEX \(indexName.quotedIdentifier) ON \(entity.table.quotedName) (\(columns))"
        if let codes = entityCodes { sql += " WHERE \"Z_ENT\" IN (\(codes.map(String.init).joined(separator: ", ")))" }
        return sql
    }

    /// The constraint's values in a row of `values`; `nil` when one of them is NULL.
    package func key(in values: ContiguousArray<Value>) -> [Value]? {
        var key: [Value] = []
        key.reserveCapacity(slots.count)
        for slot in slots {
            let value = values[slot]
            if value.isNull { return nil }
            key.append(value)
        }
        return key
    }

    /// Resolves and checks the uniqueness constraints every entity declares, parents first.
    static func resolve(_ entities: [ResolvedEntity]) throws(ModelError) {
        for entity in entities {
            var own: [[String]] = []
            for property in entity.properties where property.slot >= entity.description_.slotBase && property.options.contains(.unique) {
                own.append([property.name])
            }
            own += entity.description_.uniqueness
            var constraints = entity.superentity?.uniqueConstraints ?? []
            for keys in own {
                guard !keys.isEmpty else {
                    throw ModelError(code: .invalidUniqueness, message: "\(entity.name): @Entity(unique:) lists an empty constraint; name the properties whose values must be unique together, as in unique: [[\"first\", \"last\"]].")
                }
                var slots: [Int] = []
                for key in keys {
                    guard let property = entity.property(named: key) else {
                        throw ModelError(code: .invalidUniqueness, message: "\(entity.name): the uniqueness constraint \(keys) names '\(key)', which is not a property of \(entity.name).")
                    }
                    guard property.isStored else {
                        throw ModelError(code: .invalidUniqueness, message: "\(entity.name): the uniqueness constraint \(keys) names the to-many relationship '\(key)'; only attributes and to-one relationships can be unique.")
                    }
                    guard !slots.contains(property.slot) else {
                        throw ModelError(code: .invalidUniqueness, message: "\(entity.name): the uniqueness constraint \(keys) names '\(key)' twice.")
                    }
                    slots.append(property.slot)
                }
                if constraints.contains(where: { Set($0.slots) == Set(slots) }) { continue }
                constraints.append(UniqueConstraint(entity: entity, keys: keys, slots: slots))
            }
            entity.uniqueConstraints = constraints
        }
    }
}
