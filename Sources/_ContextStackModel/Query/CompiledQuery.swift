import Foundation
import _ContextStackCore

/// A key resolved against an entity: the to-one hops, then the property it ends at.
package struct ResolvedPath: Sendable {
    let key: String
    package let hops: [Property]
    package let leaf: Property
    /// For `relationship.@count`: the value is the number of members of `leaf`, a to-many.
    package var countsMembers = false

    /// The kind of value the path reads: a count is a whole number.
    var kind: AttributeKind? { countsMembers ? .int : leaf.attributeKind }

    /// The alias of the table the leaf is read from: one alias per distinct hop prefix.
    var joinKey: String { hops.map(\.name).joined(separator: ".") }
}

/// A condition and an order resolved against one entity, ready to become SQL or to run in memory.
///
/// Both forms come from this one structure, which is what keeps their meaning the same.
package struct CompiledQuery: Sendable {
    indirect enum Node: Sendable {
        case constant(Bool)
        case compare(ResolvedPath, ComparisonOperator, Operand)
        case text(ResolvedPath, TextOperator, String, MatchOptions)
        /// A condition on the members of one of the entity's to-many relationships, resolved
        /// against the destination entity.
        case quantified(Quantifier, Property, CompiledQuery)
        case oneOf(ResolvedPath, [Value])
        case between(ResolvedPath, Value, Value)
        case and(Node, Node)
        case or(Node, Node)
        case not(Node)
    }

    package enum Operand: Sendable {
        case value(Value)
        case path(ResolvedPath)
    }

    package struct SortTerm: Sendable {
        package let path: ResolvedPath
        let ascending: Bool
    }

    package let entity: ResolvedEntity
    let node: Node?
    package let order: [SortTerm]
    /// Every distinct chain of to-one hops the query reads through.
    package let hopChains: [[Property]]
    /// The SQL alias of the table each hop prefix joins (`""` is `t0`, the entity's own).
    package let tableAliases: [String: String]
    /// The keys a caller asked to read besides the condition's and the order's (aggregates).
    let extraPaths: [ResolvedPath]
    /// The entity's to-many relationships the condition reads through (quantifiers, @count),
    /// with the condition on their members when there is one.
    package let toManyUses: [(property: Property, inner: CompiledQuery?)]
    /// Prefixes this query's table aliases, so a nested query (a quantifier) does not clash.
    let aliasPrefix: String
    /// Whether the condition holds a string operator the dialect cannot write exactly (on
    /// PostgreSQL: MATCHES, and the `[c]`/`[d]` options). Its SQL then selects a superset of
    /// the matching rows — each such operator replaced by TRUE, or FALSE under a negation — and
    /// the rows are filtered in memory with `matches`, which evaluates it exactly. Windows and
    /// counts are then taken in memory too; aggregates and batch operations refuse.
    package let filtersInMemory: Bool

    /// Whether objects of the entity's sub-entities match too (not with `.noSubEntities`).
    let includesSubEntities: Bool
    /// The SQL the query is written in.
    let dialect: any SQLDialect

    package init(entity: ResolvedEntity, condition: Condition?, orderBy: OrderBy?, extraKeys: [String] = [],
         aliasPrefix: String = "", includesSubEntities: Bool = true, dialect: any SQLDialect = SQLiteDialect()) throws(QueryError) {
        self.entity = entity
        self.dialect = dialect
        self.includesSubEntities = includesSubEntities
        self.aliasPrefix = aliasPrefix
        var uses: [(property: Property, inner: CompiledQuery?)] = []
        var nested = 0
        var chains: [String: [Property]] = [:]
        func note(_ path: ResolvedPath) {
            if !path.hops.isEmpty { chains[path.joinKey] = path.hops }
            if path.countsMembers { uses.append((path.leaf, nil)) }
        }
        func quantify(_ quantifier: Quantifier, _ key: String, _ inner: Condition.Node) throws(QueryError) -> Node {
            let parts = key.split(separator: ".", maxSplits: 1).map(String.init)
            guard let property = entity.property(named: parts[0]), property.isToMany, let destination = property.destination, parts.count == 2 else {
                throw QueryError(.unsupported, "\(quantifier.rawValue) \(key) on \(entity.name): a quantifier needs a path that starts with one of \(entity.name)'s to-many relationships (\(entity.properties.filter(\.isToMany).map(\.name).joined(separator: ", "))), then a key of its members.", key: key, entity: entity.name)
            }
            nested += 1
            let memberCondition = Condition(try Self.strip(parts[0] + ".", from: inner, entity: entity))
            let query = try CompiledQuery(entity: destination, condition: memberCondition, orderBy: nil,
                                          aliasPrefix: "\(aliasPrefix)q\(nested)_", dialect: dialect)
            uses.append((property, query))
            return .quantified(quantifier, property, query)
        }
        var node: Node?
        if let condition {
            node = try Self.resolve(condition.node, in: entity, note: note, quantify: quantify)
        }
        filtersInMemory = node.map { Self.textMatchOutside(dialect, in: $0) != nil } ?? false
        var order: [SortTerm] = []
        for term in orderBy?.terms ?? [] {
            if let error = term.invalid { throw error }
            let path = try Self.resolvePath(term.key, in: entity)
            guard path.leaf.isStored, !path.countsMembers else {
                throw QueryError(.unsupported, "Cannot sort \(entity.name) by '\(term.key)': it is a to-many relationship.", key: term.key, entity: entity.name)
            }
            if path.leaf.attributeKind == .decimal {
                throw QueryError(.unsupported, "Cannot sort \(entity.name) by '\(term.key)': decimals are stored as text, whose order is not numeric.", key: term.key, entity: entity.name)
            }
            note(path)
            order.append(SortTerm(path: path, ascending: term.ascending))
        }
        var extraPaths: [ResolvedPath] = []
        for key in extraKeys {
            let path = try Self.resolvePath(key, in: entity)
            note(path)
            extraPaths.append(path)
        }
        self.node = node
        self.order = order
        self.extraPaths = extraPaths
        self.toManyUses = uses
        self.hopChains = chains.keys.sorted().map { chains[$0]! }
        var aliases: [String: String] = ["": "\(aliasPrefix)t0"]
        for chain in hopChains {
            var prefix = ""
            for hop in chain {
                prefix = prefix.isEmpty ? hop.name : prefix + "." + hop.name
                if aliases[prefix] == nil { aliases[prefix] = "\(aliasPrefix)t\(aliases.count)" }
            }
        }
        guard aliases.count <= Self.maximumTables else {
            let longest = hopChains.max { $0.count < $1.count }?.map(\.name) ?? []
            let path = longest.count > 4 ? longest.prefix(2).joined(separator: ".") + ".….\(longest.last!)" : longest.joined(separator: ".")
            throw QueryError(.unsupported, "This query on \(entity.name) reads through \(aliases.count - 1) related tables (the longest key path goes \(longest.count) hops: \(path)); SQLite joins at most \(Self.maximumTables) tables in one query, \(entity.name)'s own included. Use shorter key paths, or fetch in two steps.", entity: entity.name)
        }
        self.tableAliases = aliases
    }

    /// The most tables SQLite joins in one `SELECT` (its limit, 64, is the width of a bitmask).
    static let maximumTables = 64

    // MARK: - Resolution

    package static func resolvePath(_ key: String, in entity: ResolvedEntity) throws(QueryError) -> ResolvedPath {
        let parts = key.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        var current = entity
        var hops: [Property] = []
        for (index, part) in parts.enumerated() {
            guard let property = current.property(named: part) else {
                let known = current.properties.map(\.name).joined(separator: ", ")
                throw QueryError(.unknownKey, "\(entity.name) has no key '\(key)': \(current.name) has no property '\(part)' (it has \(known)).", key: key, entity: entity.name)
            }
            if property.isToMany && index == parts.count - 2 && parts[index + 1] == "@count" {
                guard hops.isEmpty else {
                    throw QueryError(.unsupported, "'\(key)' on \(entity.name): @count works on the entity's own to-many relationships, not through a to-one path.", key: key, entity: entity.name)
                }
                return ResolvedPath(key: key, hops: hops, leaf: property, countsMembers: true)
            }
            if index == parts.count - 1 {
                if property.isToMany {
                    throw QueryError(.unsupported, "'\(key)' on \(entity.name) is a to-many relationship: compare its members with a quantifier or count it.", key: key, entity: entity.name)
                }
                return ResolvedPath(key: key, hops: hops, leaf: property)
            }
            guard property.isToOne, let destination = property.destination else {
                throw QueryError(.unknownKey, "\(entity.name) has no key '\(key)': '\(part)' is not a to-one relationship, so the path cannot continue past it.", key: key, entity: entity.name)
            }
            hops.append(property)
            current = destination
        }
        throw QueryError(.unknownKey, "\(entity.name) has no key '\(key)'.", key: key, entity: entity.name)
    }

    /// The first string operator in `node` that `dialect` cannot express, quantified
    /// conditions included.
    private static func textMatchOutside(_ dialect: any SQLDialect, in node: Node) -> (ResolvedPath, TextOperator, MatchOptions)? {
        switch node {
        case .text(let path, let op, _, let options):
            return dialect.canMatchText(op, options) ? nil : (path, op, options)
        case .and(let a, let b), .or(let a, let b):
            return textMatchOutside(dialect, in: a) ?? textMatchOutside(dialect, in: b)
        case .not(let a):
            return textMatchOutside(dialect, in: a)
        case .quantified(_, _, let inner):
            return inner.node.flatMap { textMatchOutside(dialect, in: $0) }
        case .constant, .compare, .oneOf, .between:
            return nil
        }
    }

    /// Throws when the condition must be filtered in memory (`filtersInMemory`), for what runs
    /// wholly in SQL: aggregate queries and batch operations.
    /// - Parameter what: the operation, for the message (`"an aggregate query"`).
    package func requireSQLOnly(for what: String) throws(QueryError) {
        guard let node, let (path, op, options) = Self.textMatchOutside(dialect, in: node) else { return }
        throw QueryError(.unsupported, "\(entity.name).\(path.key) \(op.rawValue)\(options.formatSuffix) cannot run in \(what) on this store: its SQL has no exact equivalent of MATCHES and the [c] and [d] options, so fetches filter them in memory, and \(what) runs wholly in SQL. Fetch the objects and aggregate or change them, or drop the option.", key: path.key, entity: entity.name)
    }

    private static func resolve(_ node: Condition.Node, in entity: ResolvedEntity, note: (ResolvedPath) -> Void,
                                quantify: (Quantifier, String, Condition.Node) throws(QueryError) -> Node) throws(QueryError) -> Node {
        switch node {
        case .constant(let value): return .constant(value)
        case .and, .or:
            var operands: [Node] = []
            for operand in node.chain() { operands.append(try resolve(operand, in: entity, note: note, quantify: quantify)) }
            if case .and = node { return balanced(operands[...]) { .and($0, $1) } }
            return balanced(operands[...]) { .or($0, $1) }
        case .not(let a): return .not(try resolve(a, in: entity, note: note, quantify: quantify))
        case .text(let key, let op, let pattern, let options):
            let path = try resolvePath(key, in: entity)
            guard let kind = path.leaf.attributeKind, kind == .string || kind == .url else {
                throw QueryError(.typeMismatch, "\(entity.name).\(key) \(op.rawValue): \(describe(path.leaf)) is not text; string operators apply to String attributes.", key: key, entity: entity.name)
            }
            guard TextMatch.validate(op, options, pattern) else {
                throw QueryError(.unsupported, "\(entity.name).\(key) MATCHES \(String(reflecting: pattern)): the regular expression does not compile.", key: key, entity: entity.name)
            }
            note(path)
            return .text(path, op, pattern, options)
        case .oneOf(let key, let operands):
            let path = try resolvePath(key, in: entity)
            note(path)
            var list: [Value] = []
            for operand in operands {
                list.append(try value(of: operand, comparedWith: path, key: key, op: .equal, in: entity))
            }
            return .oneOf(path, list)
        case .between(let key, let low, let high):
            let path = try resolvePath(key, in: entity)
            note(path)
            return .between(path, try value(of: low, comparedWith: path, key: key, op: .lessOrEqual, in: entity),
                            try value(of: high, comparedWith: path, key: key, op: .lessOrEqual, in: entity))
        case .invalid(let error):
            throw error
        case .quantified(let quantifier, let key, let inner):
            return try quantify(quantifier, key, inner)
        case .compare(let key, let op, let operand):
            let path = try resolvePath(key, in: entity)
            note(path)
            let leaf = path.leaf
            func mismatch(_ what: String) -> QueryError {
                QueryError(.typeMismatch, "\(entity.name).\(key) \(op.rawValue) \(what): \(describe(leaf)) cannot be compared with \(what).", key: key, entity: entity.name)
            }
            switch operand {
            case .value(let value, let kind):
                if value.isNull && op.isOrdering {
                    throw QueryError(.unsupported, "\(entity.name).\(key) \(op.rawValue) nil never matches: use == nil or != nil.", key: key, entity: entity.name)
                }
                if let kind {
                    guard let leafKind = path.kind else { throw mismatch("a \(kind.rawValue) value") }
                    guard leafKind.isComparable(with: kind) else { throw mismatch("a \(kind.rawValue) value") }
                    if op.isOrdering && leafKind == .decimal {
                        throw QueryError(.unsupported, "\(entity.name).\(key) \(op.rawValue): decimals are stored as text and support only == and !=.", key: key, entity: entity.name)
                    }
                }
                return .compare(path, op, .value(value))
            case .key(let otherKey):
                let other = try resolvePath(otherKey, in: entity)
                note(other)
                switch (path.kind, other.kind) {
                case (let a?, let b?) where a.isComparable(with: b):
                    if op.isOrdering && a == .decimal { throw mismatch("key '\(otherKey)' with \(op.rawValue)") }
                case (nil, nil) where !op.isOrdering && leaf.destination?.rootDescription === other.leaf.destination?.rootDescription:
                    break
                default:
                    throw mismatch("key '\(otherKey)' (\(describe(other.leaf)))")
                }
                return .compare(path, op, .path(other))
            case .object(let id):
                guard leaf.isToOne, let destination = leaf.destination, destination.rootDescription === id.rootEntity else {
                    throw mismatch("the object \(id)")
                }
                guard !op.isOrdering else {
                    throw QueryError(.unsupported, "\(entity.name).\(key) \(op.rawValue) an object: relationships support only == and !=.", key: key, entity: entity.name)
                }
                return .compare(path, op, .value(.integer(id.primaryKey)))
            }
        }
    }

    /// The member condition of a quantifier: the same node with `prefix` cut from its keys.
    private static func strip(_ prefix: String, from node: Condition.Node, entity: ResolvedEntity) throws(QueryError) -> Condition.Node {
        func key(_ key: String) throws(QueryError) -> String {
            guard key.hasPrefix(prefix), key.count > prefix.count else {
                throw QueryError(.unsupported, "In a quantified condition on \(entity.name), '\(key)' does not go through '\(prefix.dropLast())': compare members' keys with values.", key: key, entity: entity.name)
            }
            return String(key.dropFirst(prefix.count))
        }
        switch node {
        case .compare(let k, let op, .key(let other)):
            return .compare(try key(k), op, .key(try key(other)))
        case .compare(let k, let op, let operand): return .compare(try key(k), op, operand)
        case .text(let k, let op, let pattern, let options): return .text(try key(k), op, pattern, options)
        case .oneOf(let k, let list): return .oneOf(try key(k), list)
        case .between(let k, let low, let high): return .between(try key(k), low, high)
        case .and, .or:
            var operands: [Condition.Node] = []
            for operand in node.chain() { operands.append(try strip(prefix, from: operand, entity: entity)) }
            if case .and = node { return balanced(operands[...]) { .and($0, $1) } }
            return balanced(operands[...]) { .or($0, $1) }
        case .not(let a): return .not(try strip(prefix, from: a, entity: entity))
        case .quantified(let quantifier, let k, let inner): return .quantified(quantifier, try key(k), try strip(prefix, from: inner, entity: entity))
        case .constant, .invalid: return node
        }
    }

    /// A constant operand checked against the key it is compared with.
    private static func value(of operand: Condition.Operand, comparedWith path: ResolvedPath, key: String,
                              op: ComparisonOperator, in entity: ResolvedEntity) throws(QueryError) -> Value {
        let leaf = path.leaf
        let mismatch = { (what: String) in
            QueryError(.typeMismatch, "\(entity.name).\(key): \(describe(leaf)) cannot be compared with \(what).", key: key, entity: entity.name)
        }
        switch operand {
        case .value(let value, let kind):
            if let kind {
                guard let leafKind = path.kind, leafKind.isComparable(with: kind) else { throw mismatch("a \(kind.rawValue) value") }
                if op.isOrdering && leafKind == .decimal {
                    throw QueryError(.unsupported, "\(entity.name).\(key): decimals are stored as text and support only == and !=.", key: key, entity: entity.name)
                }
            }
            return value
        case .object(let id):
            guard leaf.isToOne, let destination = leaf.destination, destination.rootDescription === id.rootEntity, !op.isOrdering else {
                throw mismatch("the object \(id)")
            }
            return .integer(id.primaryKey)
        case .key(let other):
            throw QueryError(.unsupported, "\(entity.name).\(key): IN and BETWEEN take values, not the key '\(other)'.", key: key, entity: entity.name)
        }
    }

    private static func describe(_ property: Property) -> String {
        if let kind = property.attributeKind { return "the \(kind.rawValue) attribute '\(property.name)'" }
        return "the relationship '\(property.name)' to \(property.destination?.name ?? "?")"
    }

    // MARK: - In memory

    /// Resolves an object's row by ID, as the evaluating context sees it (nil: no such object).
    package typealias RowResolver = (ObjectID) throws -> ObjectRow?
    /// The members of an object's to-many relationship, as the evaluating context sees them.
    package typealias MemberResolver = (ObjectID, Property) throws -> [ObjectID]

    /// The value at `path` for a row, following to-one hops through `resolve`.
    static func value(at path: ResolvedPath, of id: ObjectID? = nil, in values: ContiguousArray<Value>, resolve: RowResolver,
                      members: MemberResolver? = nil) throws -> Value {
        if path.countsMembers, let id, let members {
            return .integer(Int64(try members(id, path.leaf).count))
        }
        var current = values
        for hop in path.hops {
            guard case .integer(let key) = current[hop.slot], let destination = hop.destination,
                  let row = try resolve(ObjectID(rootEntity: destination.rootDescription, primaryKey: key))
            else { return .null }
            current = row.values
        }
        return current[path.leaf.slot]
    }

    /// Whether a row matches, with SQL's three-valued logic (`nil` is unknown: not a match).
    package func matches(_ id: ObjectID, _ values: ContiguousArray<Value>, resolve: RowResolver, members: MemberResolver) throws -> Bool {
        guard let node else { return true }
        return try withoutActuallyEscaping(resolve) { resolve in
            try withoutActuallyEscaping(members) { members in
                try Self.evaluate(node, Subject(id: id, values: values, resolve: resolve, members: members)) == true
            }
        }
    }

    /// What evaluating a node needs to know about the row at hand.
    private struct Subject {
        let id: ObjectID
        let values: ContiguousArray<Value>
        let resolve: RowResolver
        let members: MemberResolver

        func value(_ path: ResolvedPath) throws -> Value {
            try CompiledQuery.value(at: path, of: id, in: values, resolve: resolve, members: members)
        }
    }

    private static func evaluate(_ node: Node, _ row: Subject) throws -> Bool? {
        let resolve = row.resolve
        switch node {
        case .constant(let value): return value
        case .and(let a, let b):
            let left = try evaluate(a, row)
            if left == false { return false }
            let right = try evaluate(b, row)
            if right == false { return false }
            return left == nil || right == nil ? nil : true
        case .or(let a, let b):
            let left = try evaluate(a, row)
            if left == true { return true }
            let right = try evaluate(b, row)
            if right == true { return true }
            return left == nil || right == nil ? nil : false
        case .not(let a):
            return try evaluate(a, row).map(!)
        case .quantified(let quantifier, let property, let inner):
            var someMatch = false
            var allMatch = true
            for member in try row.members(row.id, property) {
                guard let memberRow = try resolve(member) else { continue }
                let outcome = try inner.node.map { try evaluate($0, Subject(id: member, values: memberRow.values, resolve: resolve, members: row.members)) } ?? true
                if outcome == true { someMatch = true } else { allMatch = false }
            }
            switch quantifier {
            case .any: return someMatch
            case .all: return allMatch
            case .none: return !someMatch
            }
        case .text(let path, let op, let pattern, let options):
            return TextMatch.evaluate(op, options, try row.value(path), pattern)
        case .oneOf(let path, let list):
            // As SQLite's IN: NULL is unknown; no match is unknown when the list holds NULL.
            let left = try row.value(path)
            if list.isEmpty { return false }
            if left.isNull { return nil }
            if list.contains(where: { !$0.isNull && Value.compare(left, $0) == 0 }) { return true }
            return list.contains(where: \.isNull) ? nil : false
        case .between(let path, let low, let high):
            let left = try row.value(path)
            return and3(order(left, low, .greaterOrEqual), order(left, high, .lessOrEqual))
        case .compare(let path, let op, let operand):
            let left = try row.value(path)
            let right: Value
            switch operand {
            case .value(let value): right = value
            case .path(let other): right = try row.value(other)
            }
            switch op {
            case .equal: return Value.compare(left, right) == 0
            case .notEqual: return Value.compare(left, right) != 0
            default: return order(left, right, op)
            }
        }
    }

    /// An ordering comparison with SQL's NULL rule: unknown when either side is NULL.
    static func order(_ left: Value, _ right: Value, _ op: ComparisonOperator) -> Bool? {
        if left.isNull || right.isNull { return nil }
        let order = Value.compare(left, right)
        switch op {
        case .less: return order < 0
        case .lessOrEqual: return order <= 0
        case .greater: return order > 0
        case .greaterOrEqual: return order >= 0
        case .equal: return order == 0
        case .notEqual: return order != 0
        }
    }

    /// SQL's AND on unknowns.
    private static func and3(_ a: Bool?, _ b: Bool?) -> Bool? {
        if a == false || b == false { return false }
        return a == nil || b == nil ? nil : true
    }

    /// Whether row `a` sorts before row `b`: the order terms, then primary key.
    package func sortsBefore(_ a: (id: ObjectID, values: ContiguousArray<Value>), _ b: (id: ObjectID, values: ContiguousArray<Value>),
                     resolve: RowResolver) throws -> Bool {
        for term in order {
            let order = Value.compare(try Self.value(at: term.path, in: a.values, resolve: resolve),
                                      try Self.value(at: term.path, in: b.values, resolve: resolve))
            if order != 0 { return term.ascending ? order < 0 : order > 0 }
        }
        return a.id.primaryKey < b.id.primaryKey
    }

    // MARK: - SQL

    /// SQL text and its bound arguments.
    package struct SQL {
        package var text: String
        package var arguments: [Value]
    }

    /// Whether a row of `other` can match: the entity itself, or one below it unless
    /// sub-entities are left out.
    package func accepts(_ other: ResolvedEntity) -> Bool {
        includesSubEntities ? entity.includes(other) : other === entity
    }

    /// `FROM … JOIN … WHERE …` for this query, with `t0` the entity's table.
    package func fromWhere(extraWhere: [String] = [], extraArguments: [Value] = []) -> SQL {
        var arguments: [Value] = []
        var conditions = whereTerms(arguments: &arguments)
        conditions += extraWhere
        arguments += extraArguments
        var text = fromClause()
        if !conditions.isEmpty { text += " WHERE " + conditions.joined(separator: " AND ") }
        return SQL(text: text, arguments: arguments)
    }

    /// `FROM table AS t0 LEFT JOIN …` for the hops the query reads through.
    func fromClause() -> String {
        let aliases = tableAliases
        var text = "FROM \(entity.table.quotedName) AS \(aliases[""]!)"
        var joined: Set<String> = [""]
        for chain in hopChains {
            var prefix = ""
            for hop in chain {
                let parentAlias = aliases[prefix]!
                prefix = prefix.isEmpty ? hop.name : prefix + "." + hop.name
                if joined.insert(prefix).inserted {
                    let alias = aliases[prefix]!
                    text += " LEFT JOIN \(hop.destination!.table.quotedName) AS \(alias) ON \(alias).\"Z_PK\" = \(parentAlias).\(hop.name.quotedIdentifier)"
                }
            }
        }
        return text
    }

    /// The WHERE terms: the entity's family (in a shared table), then the condition.
    /// With `positive` false, the condition stands under a negation: a string operator the
    /// dialect cannot write becomes FALSE rather than TRUE, so the SQL still selects a superset.
    func whereTerms(arguments: inout [Value], positive: Bool = true) -> [String] {
        var conditions: [String] = []
        let members = includesSubEntities ? entity.family : [entity]
        if entity.table.hasEntityColumn && members.count < entity.table.familyCount {
            conditions.append("\(tableAliases[""]!).\"Z_ENT\" IN (\(members.map { String($0.entityCode) }.joined(separator: ", ")))")
        }
        if let node {
            conditions.append(Self.sql(node, aliases: tableAliases, dialect: dialect, positive: positive, arguments: &arguments))
        }
        return conditions
    }

    /// `ORDER BY …, t0."Z_PK"`.
    func orderBySQL() -> String {
        let terms = order.map { dialect.orderTerm(columnSQL($0.path), ascending: $0.ascending) }
        return "ORDER BY " + (terms + [dialect.orderTerm("\(tableAliases[""]!).\"Z_PK\"", ascending: true)]).joined(separator: ", ")
    }

    /// The column a resolved path reads, as `tN."name"`.
    func columnSQL(_ path: ResolvedPath) -> String { Self.column(path, tableAliases) }

    /// The SQL of a condition node resolved against this query's entity (for HAVING).
    func conditionSQL(_ node: Node, arguments: inout [Value]) -> String {
        Self.sql(node, aliases: tableAliases, dialect: dialect, positive: true, arguments: &arguments)
    }

    private static func column(_ path: ResolvedPath, _ aliases: [String: String]) -> String {
        let owner = aliases[path.joinKey]!
        guard path.countsMembers else { return "\(owner).\(path.leaf.name.quotedIdentifier)" }
        // The number of members: a correlated subquery over the relationship's storage.
        let property = path.leaf
        switch property.storage {
        case .joinTable:
            let mine = property.joinColumns.mine
            return "(SELECT count(*) FROM \(property.joinTable!.quotedName) WHERE \(mine) = \(owner).\"Z_PK\")"
        default:
            let destination = property.destination!
            let members = "\(owner)_n"
            var sql = "(SELECT count(*) FROM \(destination.table.quotedName) AS \(members) WHERE \(members).\(property.inverse!.name.quotedIdentifier) = \(owner).\"Z_PK\""
            if destination.table.hasEntityColumn && destination.family.count < destination.table.familyCount {
                sql += " AND \(members).\"Z_ENT\" IN (\(destination.family.map { String($0.entityCode) }.joined(separator: ", ")))"
            }
            return sql + ")"
        }
    }

    /// Ties a member row (`memberAlias`) to its owner row (`ownerAlias`) through `property`.
    private static func linkSQL(_ property: Property, member memberAlias: String, owner ownerAlias: String) -> String {
        switch property.storage {
        case .joinTable:
            let (mine, theirs) = property.joinColumns
            return "\(memberAlias).\"Z_PK\" IN (SELECT \(theirs) FROM \(property.joinTable!.quotedName) WHERE \(mine) = \(ownerAlias).\"Z_PK\")"
        default:
            return "\(memberAlias).\(property.inverse!.name.quotedIdentifier) = \(ownerAlias).\"Z_PK\""
        }
    }

    /// `positive` is false under an odd number of negations (NOT, NONE): see `whereTerms`.
    /// AND, OR and ALL only grow when an operand grows, so TRUE in a positive place and FALSE
    /// in a negated one can only add rows, in SQL's three-valued logic too.
    private static func sql(_ node: Node, aliases: [String: String], dialect: any SQLDialect, positive: Bool,
                            arguments: inout [Value]) -> String {
        func sql(_ node: Node, flip: Bool = false) -> String {
            Self.sql(node, aliases: aliases, dialect: dialect, positive: positive != flip, arguments: &arguments)
        }
        switch node {
        case .constant(let value): return value ? dialect.trueCondition : dialect.falseCondition
        case .and(let a, let b): return "(\(sql(a)) AND \(sql(b)))"
        case .or(let a, let b): return "(\(sql(a)) OR \(sql(b)))"
        case .not(let a): return "(NOT \(sql(a, flip: true)))"
        case .quantified(let quantifier, let property, let inner):
            // ANY: some member matches; NONE: none does; ALL: none fails to match (NULL fails).
            var terms = [linkSQL(property, member: inner.tableAliases[""]!, owner: aliases[""]!)]
            var innerArguments: [Value] = []
            let innerTerms = inner.whereTerms(arguments: &innerArguments, positive: quantifier == .none ? !positive : positive)
            arguments += innerArguments
            let family = inner.node == nil ? innerTerms : Array(innerTerms.dropLast())
            terms += family
            let condition = inner.node == nil ? dialect.trueCondition : innerTerms.last!
            switch quantifier {
            case .any: terms.append(condition)
            case .none: terms.append(condition)
            case .all: terms.append(dialect.isNotTrue(condition))
            }
            let exists = "EXISTS (SELECT 1 \(inner.fromClause()) WHERE \(terms.joined(separator: " AND ")))"
            return quantifier == .any ? exists : "(NOT \(exists))"
        case .text(let path, let op, let pattern, let options):
            guard dialect.canMatchText(op, options) else { return positive ? dialect.trueCondition : dialect.falseCondition }
            return dialect.textMatch(column(path, aliases), op, options, pattern, arguments: &arguments)
        case .oneOf(let path, let list):
            // Nothing is in an empty list, NULL included (SQLite's `IN ()`, which PostgreSQL
            // does not parse).
            if list.isEmpty { return dialect.falseCondition }
            arguments += list
            return "\(column(path, aliases)) IN (\(Array(repeating: dialect.placeholder, count: list.count).joined(separator: ", ")))"
        case .between(let path, let low, let high):
            arguments += [low, high]
            return "\(column(path, aliases)) BETWEEN \(dialect.placeholder) AND \(dialect.placeholder)"
        case .compare(let path, let op, let operand):
            let left = column(path, aliases)
            let right: String
            switch operand {
            case .value(.null):
                return op == .equal ? "\(left) IS NULL" : "\(left) IS NOT NULL"
            case .value(let value):
                arguments.append(value)
                right = dialect.placeholder
            case .path(let other):
                right = column(other, aliases)
            }
            switch op {
            case .equal: return dialect.isSame(left, right)
            case .notEqual: return dialect.isNotSame(left, right)
            default: return "\(left) \(op.rawValue) \(right)"
            }
        }
    }
}
