import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

extension Update {
    // MARK: Batch operations

    /// Inserts one row per dictionary straight into the store, without making objects; returns
    /// how many it inserted.
    ///
    /// For example:
    ///
    /// ```swift
    /// try world.beginUpdateAndWait { update in
    ///     try update.batchInsert(Person.self, [["name": "Farmer", "age": 28], ["name": "Knight"]])
    /// }
    /// // INSERT INTO "Person" ("Z_PK", "name", "age", …) VALUES (?, ?, ?, …)   -- once per row, one transaction
    /// ```
    ///
    /// Keys are attribute names; attributes a row leaves out take their defaults. Values are
    /// `Value`s: literals work as they are (`"x"`, `3`, `2.5`, `true`, `nil`); for a `Date`,
    /// `UUID`, `URL`, `Decimal` or `Data` pass its `storedValue`, for an enum its
    /// `rawValue.storedValue`. The rows are in SQLite when this returns, in every topology, and
    /// reach main contexts and commit observers as one commit (see Docs/Writing.md). It does
    /// not commit, and is not part of, this update's own changes.
    ///
    /// - Returns: the number of rows inserted.
    /// - Throws: `QueryError` (`.unknownKey`, `.typeMismatch`) before anything is written;
    ///   `SaveError.Code.uniquenessViolated` when a row repeats a unique value. Nothing is
    ///   inserted when it throws.
    @discardableResult
    public func batchInsert<T: ManagedObject>(_ type: T.Type, _ rows: [[String: Value]]) throws -> Int {
        core.checkExecution("update.batchInsert(\(T.self).self, …)")
        let entity = core.graph.entity(for: type)
        var changes = ChangeSet()
        // Who made it, for the history and the `Commit`, as every other save of this update.
        changes.info = context.starter.info
        for row in rows {
            var values = entity.defaults
            for (key, value) in row {
                let property = try BatchValues.attribute(key, of: entity)
                values[property.slot] = try BatchValues.normalize(value, for: property, in: entity)
            }
            let key = try core.store.reserveKey(for: entity.rootDescription)
            changes.inserts.append((ObjectID(rootEntity: entity.rootDescription, primaryKey: key), ObjectRow(entity: entity, values: values)))
        }
        guard !changes.isEmpty else { return 0 }
        _ = try core.store.submit(changes, policy: .objectTrump, claimed: true, wait: true, onVisible: context.starter.receivers)
        return rows.count
    }

    /// Sets `values` on every object of `type` matching `condition`, in one SQL statement run
    /// straight against the store; returns how many objects matched.
    ///
    /// For example:
    ///
    /// ```swift
    /// let n = try update.batchUpdate(Person.self, %"age" >= 18, set: ["location": "Taipei"])
    /// // SELECT t0."Z_PK" FROM "Person" AS t0 WHERE t0."age" >= ?
    /// // UPDATE "Person" SET "location" = ? WHERE "Z_PK" IN (?, ?, …)
    /// ```
    ///
    /// It runs after every commit handed over before it, and the change is in SQLite when it
    /// returns. Main contexts that merge this update's commits, commit observers and this
    /// update's own objects learn the new values (an object this update has changed keeps its
    /// own values for the keys it changed). It neither sees nor commits this update's
    /// uncommitted changes: commit first if it should act on them.
    ///
    /// - Returns: the number of objects that matched.
    /// - Throws: `QueryError` for an unknown key or a value of the wrong type (before anything
    ///   runs); `SaveError.Code.uniquenessViolated` when it would give two objects the same
    ///   unique value. Nothing is changed when it throws.
    @discardableResult
    public func batchUpdate<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil, set values: [String: Value]) throws -> Int {
        core.checkExecution("update.batchUpdate(\(T.self).self, …)")
        let entity = core.graph.entity(for: type)
        try CompiledQuery(entity: entity, condition: condition, orderBy: nil, dialect: core.store.dialect).requireSQLOnly(for: "a batch operation")
        var assignments: [(slot: Int, value: Value)] = []
        for (key, value) in values.sorted(by: { $0.key < $1.key }) {
            let property = try BatchValues.attribute(key, of: entity)
            assignments.append((property.slot, try BatchValues.normalize(value, for: property, in: entity)))
        }
        let result = try core.store.runBatch(.update(entity, condition, assignments), info: context.starter.info, onVisible: context.starter.receivers)
        core.absorb(result.changes)
        return result.matched
    }

    /// Deletes every object of `type` matching `condition` in SQL, straight against the store,
    /// applying delete rules; returns how many objects matched.
    ///
    /// For example:
    ///
    /// ```swift
    /// let n = try update.batchDelete(Person.self, %"age" < 0)
    /// // DELETE FROM "Person" WHERE "Z_PK" IN (?, ?, …)   -- after the rules' statements
    /// ```
    ///
    /// `.cascade` deletes related objects too, `.nullify` clears the inverse to-one on
    /// survivors, `.deny` refuses (throws, deleting nothing) while a related object would
    /// survive, `.noAction` leaves references as they are; join-table rows go. Deleted objects
    /// leave main contexts that merge this update's commits and this update itself; commit
    /// observers get one commit with every deleted and changed ID. Like `batchUpdate`, it acts
    /// on what is committed, not on this update's uncommitted changes.
    ///
    /// - Returns: the number of objects that matched `condition` (objects removed by
    ///   `.cascade` are in the commit, not in this count).
    /// - Throws: `QueryError` before anything runs; `SaveError.Code.deleteDenied` for a
    ///   `.deny` rule. Nothing is deleted when it throws.
    @discardableResult
    public func batchDelete<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil) throws -> Int {
        core.checkExecution("update.batchDelete(\(T.self).self, …)")
        let entity = core.graph.entity(for: type)
        try CompiledQuery(entity: entity, condition: condition, orderBy: nil, dialect: core.store.dialect).requireSQLOnly(for: "a batch operation")
        let result = try core.store.runBatch(.delete(entity, condition), info: context.starter.info, onVisible: context.starter.receivers)
        core.absorb(result.changes)
        return result.matched
    }
}

/// Checks and converts the values of batch operations.
enum BatchValues {
    /// The attribute `key` names.
    static func attribute(_ key: String, of entity: ResolvedEntity) throws(QueryError) -> Property {
        guard let property = entity.property(named: key) else {
            throw QueryError(.unknownKey, "\(entity.name) has no attribute '\(key)' (it has \(entity.properties.filter(\.isAttribute).map(\.name).joined(separator: ", "))).", key: key, entity: entity.name)
        }
        guard property.isAttribute else {
            throw QueryError(.unsupported, "'\(key)' is a relationship of \(entity.name); batch operations set attributes only. Change relationships on objects in an update.", key: key, entity: entity.name)
        }
        return property
    }

    /// Whether `text` is wholly a decimal number: a sign, digits with at most one '.', and an
    /// optional exponent ("-12.50", ".5", "1e3"); no spaces, no grouping, no trailing text.
    static func isDecimalText(_ text: String) -> Bool {
        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
        func isSign(_ byte: UInt8?) -> Bool { byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") }
        var rest = text.utf8[...]
        if isSign(rest.first) { rest = rest.dropFirst() }
        var digits = 0, dot = false
        while let byte = rest.first, byte != UInt8(ascii: "e") && byte != UInt8(ascii: "E") {
            if isDigit(byte) {
                digits += 1
            } else if byte == UInt8(ascii: "."), !dot {
                dot = true
            } else {
                return false
            }
            rest = rest.dropFirst()
        }
        guard digits > 0 else { return false }
        guard !rest.isEmpty else { return true }
        rest = rest.dropFirst()
        if isSign(rest.first) { rest = rest.dropFirst() }
        return !rest.isEmpty && rest.allSatisfy(isDigit)
    }

    /// `value` as the attribute stores it — in the form an object of the entity would store it,
    /// so that fetches, queries and uniqueness see one value one way — or a `.typeMismatch`
    /// naming the key. An enum attribute takes its cases' raw values alone: another would read
    /// back as the property's default.
    static func normalize(_ value: Value, for property: Property, in entity: ResolvedEntity) throws(QueryError) -> Value {
        let stored = try storedForm(value, for: property, in: entity)
        if property.declared.isNoneOfItsCases(stored) {
            throw QueryError(.typeMismatch, "\(entity.name).\(property.name) cannot hold \(value): it is none of the raw values of its enum's cases.", key: property.name, entity: entity.name)
        }
        return stored
    }

    /// `value` in the form the attribute's stored type keeps it (`normalize`).
    private static func storedForm(_ value: Value, for property: Property, in entity: ResolvedEntity) throws(QueryError) -> Value {
        guard let kind = property.attributeKind else { return value }
        func mismatch(_ why: String) -> QueryError {
            QueryError(.typeMismatch, "\(entity.name).\(property.name) (\(kind.rawValue)\(property.isOptional ? "?" : "")) cannot hold \(value): \(why).", key: property.name, entity: entity.name)
        }
        switch (kind.columnType, value) {
        case (_, .null):
            guard property.isOptional else { throw mismatch("it is not optional") }
            return .null
        case ("INTEGER", .integer(let int)):
            let range: ClosedRange<Int64>? = switch kind {
            case .int16: Int64(Int16.min)...Int64(Int16.max)
            case .int32: Int64(Int32.min)...Int64(Int32.max)
            case .bool: 0...1
            default: nil
            }
            if let range, !range.contains(int) { throw mismatch("it is out of range") }
            return value
        case ("INTEGER", .double(let double)):
            guard let int = Int64(exactly: double) else { throw mismatch("it is not a whole number") }
            return try storedForm(.integer(int), for: property, in: entity)
        case ("REAL", .integer(let int)):
            return try storedForm(.double(Double(int)), for: property, in: entity)
        case ("REAL", .double(let double)):
            // A NaN is no number: nil, as a property set to one stores it (SQLite would store
            // NULL and PostgreSQL a NaN). A `Float` keeps a `Float`'s precision.
            if double.isNaN {
                guard property.isOptional else { throw mismatch("NaN is stored as nil, and it is not optional") }
                return .null
            }
            return kind == .float ? .double(Double(Float(double))) : value
        case ("TEXT", .text(let text)) where kind == .decimal:
            // In one form ("12.50" is 12.5), or a query for the value would miss the row. The
            // whole text must be the number: Foundation reads "12,50" and "12abc" as 12.
            guard Self.isDecimalText(text), let decimal = Decimal(storedValue: .text(text)) else {
                throw mismatch("it is not a decimal number (digits, one '.', an optional exponent)")
            }
            return decimal.storedValue
        case ("TEXT", .integer), ("TEXT", .double):
            guard kind == .decimal, let decimal = Decimal(storedValue: value) else {
                throw mismatch("pass a value of the attribute's type (for \(kind.rawValue), its storedValue)")
            }
            return decimal.storedValue
        case ("TEXT", .text(let text)) where kind == .url:
            guard let url = URL(string: text) else { throw mismatch("it is not a URL") }
            return url.storedValue
        case ("TEXT", .text):
            return value
        case ("BLOB", .blob(let data)):
            if kind == .uuid && data.count != 16 { throw mismatch("a UUID is 16 bytes") }
            return value
        default:
            throw mismatch("pass a value of the attribute's type (for \(kind.rawValue), its storedValue)")
        }
    }
}
