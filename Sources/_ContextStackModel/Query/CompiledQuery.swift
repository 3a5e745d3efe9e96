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
        /// A comparison; with options, text on both sides is folded first.
        case compare(Term, ComparisonOperator, Term, MatchOptions)
        /// A string operator: the text, then the pattern.
        case text(Term, TextOperator, Term, MatchOptions)
        /// A condition on the members of one of the entity's to-many relationships, resolved
        /// against the destination entity.
        case quantified(Quantifier, Property, CompiledQuery)
        case oneOf(Term, [Value], MatchOptions)
        case between(Term, Value, Value, MatchOptions)
        case and(Node, Node)
        case or(Node, Node)
        case not(Node)
    }

    /// One side of a comparison.
    package enum Term: Sendable {
        case value(Value)
        case path(ResolvedPath)
        /// The object itself (`SELF`), as its primary key.
        case identity

        /// Whether the term reads text, so that options fold it.
        var isText: Bool {
            switch self {
            case .value(let value): if case .text = value { true } else { false }
            case .path(let path): path.kind == .string || path.kind == .url
            case .identity: false
            }
        }
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
            guard let property = entity.property(named: parts[0]), property.isToMany, let destination = property.destination else {
                throw QueryError(.unsupported, "\(quantifier.rawValue) \(key) on \(entity.name): a quantifier needs a path that starts with one of \(entity.name)'s to-many relationships (\(entity.properties.filter(\.isToMany).map(\.name).joined(separator: ", "))), then a key of its members.", key: key, entity: entity.name)
            }
            nested += 1
            var memberNode = try Self.strip(parts[0], from: inner, entity: entity)
            // A path through a second to-many relationship (`friendOf.pets.name`) quantifies
            // again over its members: ANY of ANY, ALL of ALL, NONE of ANY.
            if parts.count == 2, Self.crossesToMany(parts[1], in: destination) {
                memberNode = .quantified(quantifier == .all ? .all : .any, parts[1], memberNode)
            }
            let query = try CompiledQuery(entity: destination, condition: Condition(memberNode), orderBy: nil,
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

    /// The first comparison in `node` that `dialect` cannot express, quantified conditions
    /// included, described for a message (`name ==[c]`).
    private static func textMatchOutside(_ dialect: any SQLDialect, in node: Node) -> String? {
        func describe(_ term: Term, _ op: String, _ options: MatchOptions) -> String {
            let key = if case .path(let path) = term { path.key } else { "SELF" }
            return "\(key) \(op)\(options.formatSuffix)"
        }
        switch node {
        case .text(let value, let op, let pattern, let options):
            let constant = if case .value = pattern { true } else { false }
            return dialect.canMatchText(op, options, constantPattern: constant) ? nil : describe(value, op.rawValue, options)
        case .compare(let left, let op, _, let options):
            return options.isEmpty || dialect.canFold ? nil : describe(left, op.rawValue, options)
        case .oneOf(let left, _, let options):
            return options.isEmpty || dialect.canFold ? nil : describe(left, "IN", options)
        case .between(let left, _, _, let options):
            return options.isEmpty || dialect.canFold ? nil : describe(left, "BETWEEN", options)
        case .and(let a, let b), .or(let a, let b):
            return textMatchOutside(dialect, in: a) ?? textMatchOutside(dialect, in: b)
        case .not(let a):
            return textMatchOutside(dialect, in: a)
        case .quantified(_, _, let inner):
            return inner.node.flatMap { textMatchOutside(dialect, in: $0) }
        case .constant:
            return nil
        }
    }

    /// Throws when the condition must be filtered in memory (`filtersInMemory`), for what runs
    /// wholly in SQL: aggregate queries and batch operations.
    /// - Parameter what: the operation, for the message (`"an aggregate query"`).
    package func requireSQLOnly(for what: String) throws(QueryError) {
        guard let node, let found = Self.textMatchOutside(dialect, in: node) else { return }
        throw QueryError(.unsupported, "\(entity.name).\(found) cannot run in \(what) on this store: its SQL has no exact equivalent of MATCHES and the [c] and [d] options, so fetches filter them in memory, and \(what) runs wholly in SQL. Fetch the objects and aggregate or change them, or drop the option.", entity: entity.name)
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
            return try resolveComparison(.key(key), .text(op), .constant(.value(.text(pattern), .string)), options, in: entity, note: note, quantify: quantify)
        case .oneOf(let key, let operands):
            return try resolveComparison(.key(key), .isIn, .list(operands), [], in: entity, note: note, quantify: quantify)
        case .between(let key, let low, let high):
            return try resolveComparison(.key(key), .between, .list([low, high]), [], in: entity, note: note, quantify: quantify)
        case .compare(let key, let op, let operand):
            let right: Condition.Expression = if case .key(let other) = operand { .key(other) } else { .constant(operand) }
            return try resolveComparison(.key(key), .compare(op), right, [], in: entity, note: note, quantify: quantify)
        case .expression(let left, let op, let right, let options):
            return try resolveComparison(left, op, right, options, in: entity, note: note, quantify: quantify)
        case .invalid(let error):
            throw error
        case .quantified(let quantifier, let key, let inner):
            return try quantify(quantifier, key, inner)
        }
    }

    /// One side of a comparison, resolved against the entity.
    private enum Side {
        case path(ResolvedPath)
        case value(Value, AttributeKind?)
        case object(ObjectID)
        case list([Condition.Operand])
        case identity

        var isText: Bool {
            switch self {
            case .path(let path): path.kind == .string || path.kind == .url
            case .value(let value, let kind): kind == .string || kind == .url || (kind == nil && value.stringValue != nil)
            default: false
            }
        }

        var isConstant: Bool {
            switch self {
            case .value, .object, .list: true
            case .path, .identity: false
            }
        }
    }

    /// Whether `key` goes through one of the entity's to-many relationships (`pets.name`,
    /// `friend.pets`, or `pets` itself), which makes a comparison a question about members.
    /// `pets.@count` reads a number and does not.
    static func crossesToMany(_ key: String, in entity: ResolvedEntity) -> Bool {
        let parts = key.split(separator: ".", omittingEmptySubsequences: false)
        var current = entity
        for (index, part) in parts.enumerated() {
            guard let property = current.property(named: String(part)) else { return false }
            if property.isToMany { return !(index + 1 < parts.count && parts[index + 1] == "@count") }
            guard property.isToOne, let destination = property.destination else { return false }
            current = destination
        }
        return false
    }

    /// `left op right`, checked against the model: the one place where every comparison,
    /// whichever way it was written, gets its meaning.
    private static func resolveComparison(_ left: Condition.Expression, _ op: Condition.PredicateOperator, _ right: Condition.Expression,
                                          _ options: MatchOptions, in entity: ResolvedEntity, note: (ResolvedPath) -> Void,
                                          quantify: (Quantifier, String, Condition.Node) throws(QueryError) -> Node) throws(QueryError) -> Node {
        let spelled = op.spelling + options.formatSuffix
        for case .variable(let name) in [left, right] {
            throw QueryError(.unsupported, "$\(name) in a condition on \(entity.name) has no value: give the condition its variables with .substituting([\"\(name)\": …]) before using it.", entity: entity.name)
        }
        // A key through a to-many relationship asks about members: `%@ IN pets`, `'Rex' IN
        // pets.name` and `pets CONTAINS %@` ask whether one of them is the value, and any other
        // comparison (`pets.name BEGINSWITH 'R'`) whether one of them matches (ANY).
        var toMany: [String] = []
        for case .key(let key) in [left, right] where crossesToMany(key, in: entity) { toMany.append(key) }
        if let key = toMany.first {
            guard toMany.count == 1 else {
                throw QueryError(.unsupported, "\(entity.name): \(toMany[0]) \(spelled) \(toMany[1]) compares two to-many key paths; compare one of them with a quantifier (ANY, ALL, NONE) against values.", key: key, entity: entity.name)
            }
            for case .constant(.value(.null, _)) in [left, right] where entity.property(named: key)?.isToMany == true {
                throw QueryError(.unsupported, "\(entity.name).\(key) \(spelled) nil: a to-many relationship is never nil. To ask whether it is empty, compare \(key).@count with 0.", key: key, entity: entity.name)
            }
            if case .key(key) = left {
                if case .text(.contains) = op { return try quantify(.any, key, .expression(left, .compare(.equal), right, options)) }
                return try quantify(.any, key, .expression(left, op, right, options))
            }
            switch op {
            case .isIn: return try quantify(.any, key, .expression(right, .compare(.equal), left, options))
            case .compare(let comparison): return try quantify(.any, key, .expression(right, .compare(comparison.flipped), left, options))
            default:
                throw QueryError(.unsupported, "\(entity.name): \(spelled) needs the to-many key path '\(key)' on its left.", key: key, entity: entity.name)
            }
        }

        var names: [String] = []
        func side(_ expression: Condition.Expression) throws(QueryError) -> Side {
            switch expression {
            case .key(let key), .constant(.key(let key)):
                let path = try resolvePath(key, in: entity)
                note(path)
                names.append(key)
                return .path(path)
            case .constant(.value(let value, let kind)): return .value(value, kind)
            case .constant(.object(let id)): return .object(id)
            case .list(let items): return .list(items)
            case .evaluatedObject:
                names.append("SELF")
                return .identity
            case .variable: preconditionFailure("unreachable: variables are refused above")
            }
        }
        var lhs = try side(left)
        var rhs = try side(right)
        var op = op
        // A value on the left of a comparison flips it: `18 < age` is `age > 18`.
        if case .compare(let comparison) = op, lhs.isConstant, !rhs.isConstant {
            swap(&lhs, &rhs)
            op = .compare(comparison.flipped)
        }
        let key = names.first ?? "a constant"
        func mismatch(_ what: String) -> QueryError {
            QueryError(.typeMismatch, "\(entity.name): \(describe(lhs)) \(spelled) \(what) cannot be compared.", key: names.first, entity: entity.name)
        }
        func unsupported(_ why: String) -> QueryError {
            QueryError(.unsupported, "\(entity.name).\(key) \(spelled): \(why)", key: names.first, entity: entity.name)
        }
        // Options fold text and change nothing else.
        let textOptions = lhs.isText || rhs.isText ? options : []

        switch op {
        case .compare(let comparison):
            switch (lhs, rhs) {
            case (.list, _), (_, .list):
                throw unsupported("lists go only after IN and BETWEEN.")
            case (.path(let path), .value(let value, let kind)):
                if value.isNull && comparison.isOrdering { throw unsupported("nil never matches \(comparison.rawValue): use == nil or != nil.") }
                if let kind {
                    guard let leafKind = path.kind, leafKind.isComparable(with: kind) else { throw mismatch("a \(kind.rawValue) value") }
                    if comparison.isOrdering && leafKind == .decimal { throw unsupported("decimals are stored as text and support only == and !=.") }
                }
                return .compare(.path(path), comparison, .value(value), textOptions)
            case (.path(let path), .object(let id)):
                guard path.leaf.isToOne, let destination = path.leaf.destination, destination.rootDescription === id.rootEntity else {
                    throw mismatch("the object \(id)")
                }
                guard !comparison.isOrdering else { throw unsupported("relationships support only == and !=.") }
                return .compare(.path(path), comparison, .value(.integer(id.primaryKey)), [])
            case (.path(let path), .path(let other)):
                switch (path.kind, other.kind) {
                case (let a?, let b?) where a.isComparable(with: b):
                    if comparison.isOrdering && a == .decimal { throw mismatch("the key '\(other.key)' with \(comparison.rawValue)") }
                case (nil, nil) where !comparison.isOrdering && path.leaf.destination?.rootDescription === other.leaf.destination?.rootDescription:
                    break
                default:
                    throw mismatch("the key '\(other.key)' (\(describe(other.leaf)))")
                }
                return .compare(.path(path), comparison, .path(other), textOptions)
            case (.path(let path), .identity), (.identity, .path(let path)):
                guard path.leaf.isToOne, path.leaf.destination?.rootDescription === entity.rootDescription, !comparison.isOrdering else {
                    throw mismatch("SELF")
                }
                return .compare(.path(path), comparison, .identity, [])
            case (.identity, .object(let id)):
                guard id.rootEntity === entity.rootDescription else { throw mismatch("the object \(id)") }
                guard !comparison.isOrdering else { throw unsupported("objects compare only with == and !=.") }
                return .compare(.identity, comparison, .value(.integer(id.primaryKey)), [])
            case (.identity, .value(.null, _)):
                throw unsupported("an object is never nil, so this is always \(comparison == .notEqual). To ask for an empty to-many relationship, compare its @count with 0.")
            case (.identity, .identity):
                guard !comparison.isOrdering else { throw unsupported("objects compare only with == and !=.") }
                return .constant(comparison == .equal)
            case (.identity, .value(_, let kind)):
                throw mismatch("a \(kind?.rawValue ?? "") value")
            case (.value, _), (.object, _):
                return .constant(try constantOutcome(lhs, op, rhs, textOptions, unsupported: unsupported, mismatch: mismatch))
            }
        case .isIn:
            switch (lhs, rhs) {
            case (.path(let path), .list(let items)):
                var list: [Value] = []
                for item in items { list.append(try value(of: item, comparedWith: path, key: path.key, op: .equal, in: entity)) }
                return .oneOf(.path(path), list, textOptions)
            case (.identity, .list(let items)):
                var list: [Value] = []
                for item in items {
                    switch item {
                    case .object(let id) where id.rootEntity === entity.rootDescription: list.append(.integer(id.primaryKey))
                    case .value(.null, _): list.append(.null)
                    default: throw mismatch("a list that holds \(item)")
                    }
                }
                return .oneOf(.identity, list, [])
            // A string on the right of IN: `name IN 'Wilhelmina'` is a substring test.
            case (.path, .value(.text, _)) where lhs.isText, (.path, .path) where lhs.isText && rhs.isText,
                 (.value(.text, _), .path) where rhs.isText:
                return .text(term(rhs), .contains, term(lhs), options)
            case (.value, .list), (.object, .list), (.value, .value):
                return .constant(try constantOutcome(lhs, op, rhs, textOptions, unsupported: unsupported, mismatch: mismatch))
            default:
                throw unsupported("IN takes a list on its right ({a, b} or %@ with an array), or a string to look for the left side in.")
            }
        case .between:
            switch (lhs, rhs) {
            case (.path(let path), .list(let items)) where items.count == 2:
                return .between(.path(path), try value(of: items[0], comparedWith: path, key: path.key, op: .lessOrEqual, in: entity),
                                try value(of: items[1], comparedWith: path, key: path.key, op: .lessOrEqual, in: entity), textOptions)
            case (.value, .list(let items)) where items.count == 2:
                return .constant(try constantOutcome(lhs, op, rhs, textOptions, unsupported: unsupported, mismatch: mismatch))
            default:
                throw unsupported("BETWEEN takes a key on its left and a list of two values, {low, high}, on its right.")
            }
        case .text(let textOperator):
            guard lhs.isText, rhs.isText else {
                let notText = lhs.isText ? rhs : lhs
                if case .path(let path) = notText {
                    throw QueryError(.typeMismatch, "\(entity.name).\(path.key) \(textOperator.rawValue): \(describe(path.leaf)) is not text; string operators apply to String attributes.", key: path.key, entity: entity.name)
                }
                throw mismatch(describe(notText) + " (string operators take text on both sides)")
            }
            if case .value(.text(let pattern), _) = rhs, !TextMatch.validate(textOperator, options, pattern) {
                throw unsupported("the regular expression \(String(reflecting: pattern)) does not compile.")
            }
            if case .value = lhs, case .value = rhs {
                return .constant(try constantOutcome(lhs, op, rhs, options, unsupported: unsupported, mismatch: mismatch))
            }
            return .text(term(lhs), textOperator, term(rhs), options)
        }
    }

    private static func term(_ side: Side) -> Term {
        switch side {
        case .path(let path): .path(path)
        case .value(let value, _): .value(value)
        case .object(let id): .value(.integer(id.primaryKey))
        case .identity: .identity
        case .list: preconditionFailure("unreachable: lists are not terms")
        }
    }

    /// A comparison of two constants (`%@ > %@`, `'a' IN {'a', 'b'}`), evaluated now, as Apple
    /// evaluates it. One that nil makes unknown throws, as `key > nil` does; objects compare
    /// by ID, with == and != and IN only.
    private static func constantOutcome(_ lhs: Side, _ op: Condition.PredicateOperator, _ rhs: Side, _ options: MatchOptions,
                                        unsupported: (String) -> QueryError, mismatch: (String) -> QueryError) throws(QueryError) -> Bool {
        func fold(_ value: Value) -> Value { Self.fold(value, options) }
        /// Whether two constants are the same: values by value (nil equals nil), objects by ID.
        func same(_ a: Condition.Operand, _ b: Condition.Operand) throws(QueryError) -> Bool {
            switch (a, b) {
            case (.value(let x, _), .value(let y, _)): return Value.compare(fold(x), fold(y)) == 0
            case (.object(let x), .object(let y)): return x == y
            case (.object, .value(let y, _)) where y.isNull, (.value(let y, _), .object) where y.isNull: return false
            default: throw mismatch(describe(rhs))
            }
        }
        let left: Condition.Operand
        switch lhs {
        case .value(let value, let kind): left = .value(value, kind)
        case .object(let id): left = .object(id)
        default: preconditionFailure("unreachable: only constants are evaluated")
        }
        switch (op, rhs) {
        case (.compare(let comparison), .value(let right, let kind)):
            if comparison.isOrdering {
                guard case .value(let value, _) = left else { throw unsupported("objects compare only with == and !=.") }
                guard let outcome = order(fold(value), fold(right), comparison) else { throw unsupported("nil never matches \(comparison.rawValue): use == nil or != nil.") }
                return outcome
            }
            return try same(left, .value(right, kind)) == (comparison == .equal)
        case (.compare(let comparison), .object(let id)):
            guard !comparison.isOrdering else { throw unsupported("objects compare only with == and !=.") }
            return try same(left, .object(id)) == (comparison == .equal)
        case (.isIn, .list(let items)):
            if case .value(let value, _) = left, value.isNull { throw unsupported("nil is in no list: compare with == nil instead.") }
            for item in items where try same(left, item) {
                if case .value(let value, _) = item, value.isNull { continue }
                return true
            }
            return false
        case (.isIn, .value(.text(let text), _)):
            guard case .value(.text(let wanted), _) = left else { throw mismatch(describe(lhs)) }
            return TextMatch.evaluate(.contains, options, text, wanted)
        case (.between, .list(let items)):
            guard case .value(let value, _) = left, case .value(let low, _) = items[0], case .value(let high, _) = items[1] else {
                throw mismatch(describe(rhs))
            }
            guard let above = order(fold(value), fold(low), .greaterOrEqual), let below = order(fold(value), fold(high), .lessOrEqual) else {
                throw unsupported("nil is between nothing.")
            }
            return above && below
        case (.text(let textOperator), .value(.text(let pattern), _)):
            guard case .value(.text(let text), _) = left else { throw mismatch(describe(lhs)) }
            return TextMatch.evaluate(textOperator, options, text, pattern)
        default:
            throw mismatch(describe(rhs))
        }
    }

    private static func describe(_ side: Side) -> String {
        switch side {
        case .path(let path): "'\(path.key)'"
        case .value(let value, let kind): kind.map { "the \($0.rawValue) \(value)" } ?? value.description
        case .object(let id): "the object \(id)"
        case .list(let items): "a list of \(items.count)"
        case .identity: "SELF"
        }
    }

    /// The member condition of a quantifier over `relationship`: the same node with
    /// `relationship.` cut from its keys, and the relationship itself (`ANY pets == %@`) read as
    /// the member, `SELF`.
    private static func strip(_ relationship: String, from node: Condition.Node, entity: ResolvedEntity) throws(QueryError) -> Condition.Node {
        let prefix = relationship + "."
        func key(_ key: String) throws(QueryError) -> String {
            guard key.hasPrefix(prefix), key.count > prefix.count else {
                throw QueryError(.unsupported, "In a quantified condition on \(entity.name), '\(key)' does not go through '\(relationship)': compare members' keys with values.", key: key, entity: entity.name)
            }
            return String(key.dropFirst(prefix.count))
        }
        func side(_ expression: Condition.Expression) throws(QueryError) -> Condition.Expression {
            switch expression {
            case .key(relationship), .constant(.key(relationship)): return .evaluatedObject
            case .key(let k), .constant(.key(let k)): return .key(try key(k))
            case .constant, .list, .evaluatedObject, .variable: return expression
            }
        }
        switch node {
        case .compare(let k, let op, let operand):
            let right: Condition.Expression = if case .key(let other) = operand { .key(other) } else { .constant(operand) }
            switch (try side(.key(k)), try side(right)) {
            case (.key(let l), .key(let r)): return .compare(l, op, .key(r))
            case (.key(let l), .constant(let value)): return .compare(l, op, value)
            case (let l, let r): return .expression(l, .compare(op), r, [])
            }
        case .text(let k, let op, let pattern, let options):
            return .text(try key(k), op, pattern, options)
        case .oneOf(let k, let list):
            if k == relationship { return .expression(.evaluatedObject, .isIn, .list(list), []) }
            return .oneOf(try key(k), list)
        case .between(let k, let low, let high): return .between(try key(k), low, high)
        case .expression(let left, let op, let right, let options):
            return .expression(try side(left), op, try side(right), options)
        case .and, .or:
            var operands: [Condition.Node] = []
            for operand in node.chain() { operands.append(try strip(relationship, from: operand, entity: entity)) }
            if case .and = node { return balanced(operands[...]) { .and($0, $1) } }
            return balanced(operands[...]) { .or($0, $1) }
        case .not(let a): return .not(try strip(relationship, from: a, entity: entity))
        case .quantified(let quantifier, let k, let inner): return .quantified(quantifier, try key(k), try strip(relationship, from: inner, entity: entity))
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

        /// A term's value, with its text folded as `options` say.
        func value(_ term: Term, folding options: MatchOptions = []) throws -> Value {
            let value: Value = switch term {
            case .value(let value): value
            case .path(let path): try self.value(path)
            case .identity: .integer(id.primaryKey)
            }
            return CompiledQuery.fold(value, options)
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
        case .text(let value, let op, let pattern, let options):
            guard case .text(let wanted) = try row.value(pattern) else { return nil }
            return TextMatch.evaluate(op, options, try row.value(value), wanted)
        case .oneOf(let term, let list, let options):
            // As SQLite's IN: NULL is unknown; no match is unknown when the list holds NULL.
            let left = try row.value(term, folding: options)
            if list.isEmpty { return false }
            if left.isNull { return nil }
            if list.contains(where: { !$0.isNull && Value.compare(left, Self.fold($0, options)) == 0 }) { return true }
            return list.contains(where: \.isNull) ? nil : false
        case .between(let term, let low, let high, let options):
            let left = try row.value(term, folding: options)
            return and3(order(left, Self.fold(low, options), .greaterOrEqual), order(left, Self.fold(high, options), .lessOrEqual))
        case .compare(let left, let op, let right, let options):
            let a = try row.value(left, folding: options)
            let b = try row.value(right, folding: options)
            switch op {
            case .equal: return Value.compare(a, b) == 0
            case .notEqual: return Value.compare(a, b) != 0
            default: return order(a, b, op)
            }
        }
    }

    /// A value with its text folded as `options` say.
    static func fold(_ value: Value, _ options: MatchOptions) -> Value {
        if !options.isEmpty, case .text(let text) = value { return .text(TextMatch.fold(text, options)) }
        return value
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
        case .text(let value, let op, let pattern, let options):
            let constant: String? = if case .value(.text(let text)) = pattern { text } else { nil }
            guard dialect.canMatchText(op, options, constantPattern: constant != nil) else { return positive ? dialect.trueCondition : dialect.falseCondition }
            let text = { (arguments: inout [Value]) in term(value, folding: [], aliases: aliases, dialect: dialect, arguments: &arguments) }
            if let constant { return dialect.textMatch(text, op, options, pattern: .constant(constant), arguments: &arguments) }
            // A pattern read from a column binds nothing.
            var none: [Value] = []
            let patternSQL = term(pattern, folding: [], aliases: aliases, dialect: dialect, arguments: &none)
            return dialect.textMatch(text, op, options, pattern: .sql(patternSQL), arguments: &arguments)
        case .oneOf(let left, let list, let options):
            // Nothing is in an empty list, NULL included (SQLite's `IN ()`, which PostgreSQL
            // does not parse).
            if list.isEmpty { return dialect.falseCondition }
            guard options.isEmpty || dialect.canFold else { return positive ? dialect.trueCondition : dialect.falseCondition }
            let column = term(left, folding: options, aliases: aliases, dialect: dialect, arguments: &arguments)
            arguments += list.map { fold($0, options) }
            return "\(column) IN (\(Array(repeating: dialect.placeholder, count: list.count).joined(separator: ", ")))"
        case .between(let left, let low, let high, let options):
            guard options.isEmpty || dialect.canFold else { return positive ? dialect.trueCondition : dialect.falseCondition }
            let column = term(left, folding: options, aliases: aliases, dialect: dialect, arguments: &arguments)
            arguments += [fold(low, options), fold(high, options)]
            return "\(column) BETWEEN \(dialect.placeholder) AND \(dialect.placeholder)"
        case .compare(let leftTerm, let op, let rightTerm, let options):
            guard options.isEmpty || dialect.canFold else { return positive ? dialect.trueCondition : dialect.falseCondition }
            let left = term(leftTerm, folding: options, aliases: aliases, dialect: dialect, arguments: &arguments)
            if case .value(.null) = rightTerm {
                return op == .equal ? "\(left) IS NULL" : "\(left) IS NOT NULL"
            }
            let right = term(rightTerm, folding: options, aliases: aliases, dialect: dialect, arguments: &arguments)
            switch op {
            case .equal: return dialect.isSame(left, right)
            case .notEqual: return dialect.isNotSame(left, right)
            default: return "\(left) \(op.rawValue) \(right)"
            }
        }
    }

    /// A term as SQL: a column, a bound value, or the row's primary key; text folded as
    /// `options` say (a value folded here, a column by the dialect's folding function).
    private static func term(_ term: Term, folding options: MatchOptions, aliases: [String: String], dialect: any SQLDialect,
                             arguments: inout [Value]) -> String {
        switch term {
        case .value(let value):
            arguments.append(fold(value, options))
            return dialect.placeholder
        case .path(let path):
            let sql = column(path, aliases)
            return options.isEmpty || !term.isText ? sql : dialect.fold(sql, options)
        case .identity:
            return "\(aliases[""]!).\"Z_PK\""
        }
    }
}
