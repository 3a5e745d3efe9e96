import Foundation
import _ContextStackCore

/// A key resolved against an entity: the to-one hops, then the property it ends at.
package struct ResolvedPath: Sendable {
    let key: String
    package let hops: [Property]
    package let leaf: Property
    /// For `relationship.@count`, `relationship.@sum.key`, … and SUBQUERY: the value is a
    /// number computed from the members of `leaf`, a to-many relationship.
    package var collection: Collection?

    /// The kind of value the path reads: a count is a whole number, an average a double.
    var kind: AttributeKind? { collection.map(\.kind) ?? leaf.attributeKind }

    /// The alias of the table the leaf is read from: one alias per distinct hop prefix.
    var joinKey: String { hops.isEmpty ? "" : hops.map(\.name).joined(separator: ".") }
}

/// `@count`, `@sum`, `@avg`, `@min` or `@max` over the members of a to-many relationship.
package enum CollectionFunction: String, Sendable, CaseIterable {
    case count, sum, avg, min, max
}

/// A number computed from the members of a to-many relationship (`pets.@sum.age`), optionally
/// only those that match a condition (`SUBQUERY(pets, $p, $p.age > 3).@count`). In SQL it is a
/// correlated subquery; in memory, a loop over the members the context sees.
package final class Collection: Sendable {
    package let function: CollectionFunction
    /// The member attribute aggregated; nil for `@count`.
    package let member: Property?
    /// SUBQUERY's condition on the members, resolved against the destination entity.
    package let filter: CompiledQuery?

    init(function: CollectionFunction, member: Property?, filter: CompiledQuery?) {
        self.function = function
        self.member = member
        self.filter = filter
    }

    /// A count is a whole number; an average a double; a sum, a minimum and a maximum the
    /// member attribute's kind (a sum of whole numbers stays whole).
    var kind: AttributeKind {
        switch function {
        case .count: .int
        case .avg: .double
        case .sum: member?.attributeKind?.isWhole == true ? .int : .double
        case .min, .max: member?.attributeKind ?? .int
        }
    }

    /// The function's value over the members' values (NULLs skipped, as SQL skips them): the
    /// number of members for `@count`, 0 for `@sum` of none, NULL for `@avg`, `@min` and
    /// `@max` of none. Whole numbers are summed exactly, as SQL sums them: a sum beyond
    /// `Int64` throws, as SQL's `sum` fails, and an average divides the exact sum.
    func evaluate(count: Int, values: [Value], key: String) throws(QueryError) -> Value {
        let present = values.filter { !$0.isNull }
        func wholeSum() -> Int64? {
            var total: Int64 = 0
            for value in present {
                guard case .integer(let number) = value else { return nil }
                let (sum, overflow) = total.addingReportingOverflow(number)
                if overflow { return nil }
                total = sum
            }
            return total
        }
        let doubleSum = { present.reduce(0.0) { $0 + ($1.doubleValue ?? 0) } }
        switch function {
        case .count:
            return .integer(Int64(count))
        case .sum:
            guard kind == .int else { return .double(doubleSum()) }
            guard let total = wholeSum() else {
                throw QueryError(.unsupported, "\(key): the sum of whole numbers overflows a 64-bit integer (SQL's sum fails the same way).", key: key)
            }
            return .integer(total)
        case .avg:
            guard !present.isEmpty else { return .null }
            return .double((wholeSum().map(Double.init) ?? doubleSum()) / Double(present.count))
        case .min:
            return present.min { Value.compare($0, $1) < 0 } ?? .null
        case .max:
            return present.max { Value.compare($0, $1) < 0 } ?? .null
        }
    }
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
        /// A condition on the members of a to-many relationship — the entity's own, or one
        /// reached through to-one hops (`ANY friend.pets.name`) — resolved against the
        /// destination entity.
        case quantified(Quantifier, hops: [Property], Property, CompiledQuery)
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
        /// `left op right`, in `Double` (see `Condition.ArithmeticOperator.apply`).
        indirect case arithmetic(Term, Condition.ArithmeticOperator, Term)
        /// In a SUBQUERY's condition, a key of the object outside it.
        case outer(ResolvedPath)

        var isOuter: Bool { if case .outer = self { true } else { false } }

        /// Whether the term is a column as it is stored (`t0."name"`), not a subquery over a
        /// collection, a bound value or a computation.
        var isColumn: Bool {
            switch self {
            case .path(let path), .outer(let path): path.collection == nil
            case .value, .identity, .arithmetic: false
            }
        }

        /// Whether the term reads text, so that options fold it.
        var isText: Bool {
            switch self {
            case .value(let value): if case .text = value { true } else { false }
            case .path(let path), .outer(let path): path.kind == .string || path.kind == .url
            case .identity, .arithmetic: false
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
    package let toManyUses: [(hops: [Property], property: Property, inner: CompiledQuery?)]
    /// Prefixes this query's table aliases, so a nested query (a quantifier) does not clash.
    let aliasPrefix: String
    /// For a SUBQUERY's condition: the keys of the object outside it that it reads, resolved
    /// against that object's entity (whose query joins their hops).
    let outerPaths: [ResolvedPath]
    /// Whether the condition holds a comparison the dialect cannot write exactly (on
    /// PostgreSQL: MATCHES, the `[c]`/`[d]` options, `**`, and a SUBQUERY whose condition holds
    /// one of those). Its SQL then selects a superset of the matching rows — each such
    /// comparison replaced by TRUE, or FALSE under a negation — and
    /// the rows are filtered in memory with `matches`, which evaluates it exactly. Windows and
    /// counts are then taken in memory too; aggregates and batch operations refuse.
    package let filtersInMemory: Bool

    /// Whether objects of the entity's sub-entities match too (not with `.noSubEntities`).
    let includesSubEntities: Bool
    /// The SQL the query is written in.
    let dialect: any SQLDialect

    package init(entity: ResolvedEntity, condition: Condition?, orderBy: OrderBy?, extraKeys: [String] = [],
         aliasPrefix: String = "", includesSubEntities: Bool = true, dialect: any SQLDialect = SQLiteDialect(),
         outerEntity: ResolvedEntity? = nil, now: Instant = Instant()) throws(QueryError) {
        self.entity = entity
        self.dialect = dialect
        self.includesSubEntities = includesSubEntities
        self.aliasPrefix = aliasPrefix
        let resolver = Resolver(entity: entity, dialect: dialect, aliasPrefix: aliasPrefix, outerEntity: outerEntity, now: now)
        var node: Node?
        if let condition {
            node = try resolver.resolve(condition.node)
        }
        filtersInMemory = node.map { Self.inexactComparison(dialect, in: $0) != nil } ?? false
        var order: [SortTerm] = []
        for term in orderBy?.terms ?? [] {
            if let error = term.invalid { throw error }
            let path = try Self.resolvePath(term.key, in: entity)
            guard path.leaf.isStored, path.collection == nil else {
                throw QueryError(.unsupported, "Cannot sort \(entity.name) by '\(term.key)': it reads a to-many relationship, and, as in Core Data, a sort takes attributes and to-one key paths only. Keep the number in an attribute to sort by it.", key: term.key, entity: entity.name)
            }
            if path.leaf.attributeKind == .decimal {
                throw QueryError(.unsupported, "Cannot sort \(entity.name) by '\(term.key)': decimals are stored as text, whose order is not numeric.", key: term.key, entity: entity.name)
            }
            resolver.note(path)
            order.append(SortTerm(path: path, ascending: term.ascending))
        }
        var extraPaths: [ResolvedPath] = []
        for key in extraKeys {
            let path = try Self.resolvePath(key, in: entity)
            resolver.note(path)
            extraPaths.append(path)
        }
        self.node = node
        self.order = order
        self.extraPaths = extraPaths
        self.toManyUses = resolver.uses
        self.outerPaths = resolver.outerPaths
        let chains = resolver.chains
        self.hopChains = chains.isEmpty ? [] : chains.keys.sorted().map { chains[$0]! }
        // Most queries join nothing and have no prefix: they share one table of aliases (a
        // dictionary made, hashed into and freed again was 1.5 k instructions of a 46 k-
        // instruction prefix query).
        if hopChains.isEmpty && aliasPrefix.isEmpty {
            self.tableAliases = Self.plainAliases
            return
        }
        var aliases: [String: String] = ["": aliasPrefix.isEmpty ? "t0" : "\(aliasPrefix)t0"]
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

    /// The aliases of a query that joins nothing and has no prefix.
    private static let plainAliases: [String: String] = ["": "t0"]

    /// `now()` for one query and the queries nested in it: read from the clock the first time
    /// a condition asks for it (most never do), then the same for all of them.
    package final class Instant {
        private var seconds: Double?

        package init() {}

        /// Seconds since 1970.
        var value: Double {
            if let seconds { return seconds }
            let now = Date().timeIntervalSince1970
            seconds = now
            return now
        }
    }

    /// The most tables SQLite joins in one `SELECT` (its limit, 64, is the width of a bitmask).
    static let maximumTables = 64

    // MARK: - Resolution

    package static func resolvePath(_ key: String, in entity: ResolvedEntity) throws(QueryError) -> ResolvedPath {
        // One of the entity's own attributes or to-one relationships: no splitting for those.
        if !key.utf8.contains(UInt8(ascii: ".")), let property = entity.property(named: key), !property.isToMany {
            return ResolvedPath(key: key, hops: [], leaf: property)
        }
        let parts = key.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        var current = entity
        var hops: [Property] = []
        for (index, part) in parts.enumerated() {
            guard let property = current.property(named: part) else {
                let known = current.properties.map(\.name).joined(separator: ", ")
                throw QueryError(.unknownKey, "\(entity.name) has no key '\(key)': \(current.name) has no property '\(part)' (it has \(known)).", key: key, entity: entity.name)
            }
            // `pets.@count`, `pets.@sum.age`: a number computed from the members.
            if property.isToMany, index + 1 < parts.count, parts[index + 1].hasPrefix("@") {
                let name = String(parts[index + 1].dropFirst())
                guard let function = CollectionFunction(rawValue: name) else {
                    throw QueryError(.unknownKey, "'\(key)' on \(entity.name): @\(name) is not a collection operator; use @count, @sum, @avg, @min or @max.", key: key, entity: entity.name)
                }
                guard hops.isEmpty else {
                    throw QueryError(.unsupported, "'\(key)' on \(entity.name): @\(name) works on the entity's own to-many relationships, not through a to-one path.", key: key, entity: entity.name)
                }
                guard index + 3 >= parts.count else {
                    throw QueryError(.unsupported, "'\(key)' on \(entity.name): after @\(name) comes at most one attribute of \(property.destination!.name), not a key path.", key: key, entity: entity.name)
                }
                return try collectionPath(key, property, function, index + 2 < parts.count ? parts[index + 2] : nil, filter: nil, in: entity)
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
    static func inexactComparison(_ dialect: any SQLDialect, in node: Node) -> String? {
        func describe(_ term: Term, _ op: String, _ options: MatchOptions) -> String {
            let key = switch term {
            case .path(let path), .outer(let path): path.key
            case .identity: "SELF"
            case .value, .arithmetic: "an expression"
            }
            return "\(key) \(op)\(options.formatSuffix)"
        }
        /// A term the dialect cannot compute: `**` on PostgreSQL, or a SUBQUERY whose
        /// condition must itself be filtered in memory.
        func unwritable(_ term: Term) -> Bool {
            switch term {
            case .arithmetic(let a, let op, let b): !dialect.canCompute(op) || unwritable(a) || unwritable(b)
            case .path(let path), .outer(let path): path.collection?.filter?.filtersInMemory == true
            case .value, .identity: false
            }
        }
        switch node {
        case .text(let value, let op, let pattern, let options):
            let constant = if case .value = pattern { true } else { false }
            let exact = dialect.canMatchText(op, options, constantPattern: constant) && !unwritable(value) && !unwritable(pattern)
            return exact ? nil : describe(value, op.rawValue, options)
        case .compare(let left, let op, let right, let options):
            return (options.isEmpty || dialect.canFold) && !unwritable(left) && !unwritable(right) ? nil : describe(left, op.rawValue, options)
        case .oneOf(let left, _, let options):
            return (options.isEmpty || dialect.canFold) && !unwritable(left) ? nil : describe(left, "IN", options)
        case .between(let left, _, _, let options):
            return (options.isEmpty || dialect.canFold) && !unwritable(left) ? nil : describe(left, "BETWEEN", options)
        case .and(let a, let b), .or(let a, let b):
            return inexactComparison(dialect, in: a) ?? inexactComparison(dialect, in: b)
        case .not(let a):
            return inexactComparison(dialect, in: a)
        case .quantified(_, _, _, let inner):
            return inner.node.flatMap { inexactComparison(dialect, in: $0) }
        case .constant:
            return nil
        }
    }

    /// Throws when the condition must be filtered in memory (`filtersInMemory`), for what runs
    /// wholly in SQL: aggregate queries and batch operations.
    /// - Parameter what: the operation, for the message (`"an aggregate query"`).
    package func requireSQLOnly(for what: String) throws(QueryError) {
        guard let node, let found = Self.inexactComparison(dialect, in: node) else { return }
        throw QueryError(.unsupported, "\(entity.name).\(found) cannot run in \(what) on this store: its SQL has no exact equivalent of MATCHES, the [c] and [d] options and ** (power), so fetches filter them in memory, and \(what) runs wholly in SQL. Fetch the objects and aggregate or change them, or drop the option.", entity: entity.name)
    }
}
