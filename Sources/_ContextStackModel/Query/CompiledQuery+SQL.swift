import Foundation
import _ContextStackCore

extension CompiledQuery {
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

    /// `FROM … JOIN … WHERE …` for this query, with `t0` the entity's table; with `columns`,
    /// `SELECT columns FROM …`.
    package func fromWhere(selecting columns: String? = nil, extraWhere: [String] = [], extraArguments: [Value] = []) -> SQL {
        var arguments: [Value] = []
        var conditions = whereTerms(arguments: &arguments)
        conditions += extraWhere
        arguments += extraArguments
        // A query of a known shape does not come here for its text (`windowSQL`).
        var text = columns.map { "SELECT \($0) \(fromClause())" } ?? fromClause()
        for (index, condition) in conditions.enumerated() {
            text += index == 0 ? " WHERE " : " AND "
            text += condition
        }
        return SQL(text: text, arguments: arguments)
    }

    /// `FROM table AS t0 LEFT JOIN …` for the hops the query reads through.
    func fromClause() -> String {
        // The common case, a query of one table and not nested: the text the table made once.
        if hopChains.isEmpty && aliasPrefix.isEmpty { return entity.table.fromT0 }
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
                    text += " LEFT JOIN \(hop.destination!.table.quotedName) AS \(alias) ON \(alias).\"Z_PK\" = \(parentAlias).\(hop.quotedName)"
                }
            }
        }
        return text
    }

    /// The WHERE terms: the entity's family (in a shared table), then the condition.
    /// With `positive` false, the condition stands under a negation: a string operator the
    /// dialect cannot write becomes FALSE rather than TRUE, so the SQL still selects a superset.
    /// `outer` holds the table aliases of the query a SUBQUERY's condition sits in.
    func whereTerms(arguments: inout [Value], positive: Bool = true, outer: [String: String] = [:]) -> [String] {
        var conditions: [String] = []
        let members = includesSubEntities ? entity.family : [entity]
        if entity.table.hasEntityColumn && members.count < entity.table.familyCount {
            conditions.append("\(tableAliases[""]!).\"Z_ENT\" IN (\(members.map { String($0.entityCode) }.joined(separator: ", ")))")
        }
        if let node {
            conditions.append(Self.sql(node, aliases: tableAliases, outer: outer, dialect: dialect, positive: positive, arguments: &arguments))
        }
        return conditions
    }

    /// Whether this query's window of stored rows comes in key order alone — no order, no
    /// `LIMIT`, no `OFFSET` —, so that a caller may put them in key order itself and the SQL
    /// need not (`orderBySQL(byKey: false)`).
    func isInKeyOrderAlone(offset: Int, limit: Int?) -> Bool {
        order.isEmpty && limit == nil && offset <= 0
    }

    /// `ORDER BY …, t0."Z_PK"`. The key is never NULL, so its term needs no word on where NULL
    /// goes, and written without one it is the order of the primary key's index: PostgreSQL's
    /// `ASC NULLS FIRST` is not, and made it sort every row a fetch reads (spilling to disk past
    /// `work_mem`, 100,000 rows of ten columns already).
    ///
    /// `byKey: false` leaves the key out of a query without an order (an empty text), for a
    /// caller that puts the rows in key order itself: a fetch on an index of another column
    /// (`name >= ? AND name < ?`) reads the rows in that column's order, and SQLite sorted
    /// them again in a temporary B-tree, a few thousand instructions for the 11 rows of a
    /// prefix query, where sorting the objects costs a few hundred.
    func orderBySQL(byKey: Bool = true) -> String {
        precondition(byKey || order.isEmpty, "unreachable: only a query without an order leaves its key order to its caller")
        let key = "\(tableAliases[""]!).\"Z_PK\" ASC"
        if order.isEmpty { return byKey ? "ORDER BY " + key : "" }
        return "ORDER BY " + (order.map { dialect.orderTerm(columnSQL($0.path), ascending: $0.ascending) } + [key]).joined(separator: ", ")
    }

    /// The column a resolved path reads, as `tN."name"`.
    /// A SUBQUERY's count binds values, so it is written with `term`, never here.
    func columnSQL(_ path: ResolvedPath) -> String {
        precondition(path.collection?.filter == nil, "unreachable: SUBQUERY paths come only from conditions")
        var none: [Value] = []
        return Self.column(path, tableAliases, dialect: dialect, arguments: &none)
    }

    /// The SQL of a condition node resolved against this query's entity (for HAVING).
    func conditionSQL(_ node: Node, arguments: inout [Value]) -> String {
        Self.sql(node, aliases: tableAliases, outer: [:], dialect: dialect, positive: true, arguments: &arguments)
    }

    /// The column a path reads; for a collection (`pets.@sum.age`, a SUBQUERY), a correlated
    /// subquery over the relationship's members.
    static func column(_ path: ResolvedPath, _ aliases: [String: String], dialect: any SQLDialect, arguments: inout [Value]) -> String {
        let owner = aliases[path.joinKey]!
        guard let collection = path.collection else { return "\(owner).\(path.leaf.quotedName)" }
        let property = path.leaf
        let destination = property.destination!
        if collection.function == .count, collection.filter == nil, property.storage == .joinTable {
            // The number of links: the join table alone answers it.
            let mine = property.joinColumns.mine
            return "(SELECT count(*) FROM \(property.joinTable!.quotedName) WHERE \(mine) = \(owner).\"Z_PK\")"
        }
        let members: String
        var from: String
        var terms: [String]
        if let filter = collection.filter {
            members = filter.tableAliases[""]!
            from = filter.fromClause()
            terms = [linkSQL(property, member: members, owner: owner)]
            terms += filter.whereTerms(arguments: &arguments, outer: aliases)
        } else {
            members = "\(owner)_n"
            from = "FROM \(destination.table.quotedName) AS \(members)"
            terms = [linkSQL(property, member: members, owner: owner)]
            if destination.table.hasEntityColumn && destination.family.count < destination.table.familyCount {
                terms.append("\(members).\"Z_ENT\" IN (\(destination.family.map { String($0.entityCode) }.joined(separator: ", ")))")
            }
        }
        let value = collection.member.map { "\(members).\($0.quotedName)" } ?? "*"
        from += " WHERE " + terms.joined(separator: " AND ")
        return "(SELECT \(dialect.collectionAggregate(collection.function, of: value, kind: collection.kind)) \(from))"
    }

    /// Ties a member row (`memberAlias`) to its owner row (`ownerAlias`) through `property`.
    static func linkSQL(_ property: Property, member memberAlias: String, owner ownerAlias: String) -> String {
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
    /// in a negated one can only add rows, in SQL's three-valued logic too. `outer` holds the
    /// aliases of the query around a SUBQUERY's condition, for the keys it reads there.
    static func sql(_ node: Node, aliases: [String: String], outer: [String: String], dialect: any SQLDialect, positive: Bool,
                    arguments: inout [Value]) -> String {
        func sql(_ node: Node, flip: Bool = false) -> String {
            Self.sql(node, aliases: aliases, outer: outer, dialect: dialect, positive: positive != flip, arguments: &arguments)
        }
        func term(_ term: Term, folding options: MatchOptions = [], arguments: inout [Value]) -> String {
            Self.term(term, folding: options, aliases: aliases, outer: outer, dialect: dialect, arguments: &arguments)
        }
        switch node {
        case .constant(let value): return value ? dialect.trueCondition : dialect.falseCondition
        case .and(let a, let b): return "(\(sql(a)) AND \(sql(b)))"
        case .or(let a, let b): return "(\(sql(a)) OR \(sql(b)))"
        case .not(let a): return "(NOT \(sql(a, flip: true)))"
        case .quantified(let quantifier, let hops, let property, let inner):
            // ANY: some member matches; NONE: none does; ALL: none fails to match (NULL fails).
            // Through to-one hops, the owner is the hops' joined row (none where a hop is nil).
            let owner = aliases[hops.map(\.name).joined(separator: ".")]!
            var terms = [linkSQL(property, member: inner.tableAliases[""]!, owner: owner)]
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
        case .text, .oneOf, .between, .compare:
            // A comparison the dialect cannot write exactly selects a superset; `matches` decides.
            if inexactComparison(dialect, in: node) != nil { return positive ? dialect.trueCondition : dialect.falseCondition }
        }
        switch node {
        case .text(let value, let op, let pattern, let options):
            let text = { (arguments: inout [Value]) in term(value, arguments: &arguments) }
            if case .value(.text(let constant)) = pattern {
                // The value is a text attribute's (resolution refuses other keys).
                if let match = dialect.textAttributeMatch(op, options, constant: constant, column: value.isColumn) {
                    let sql = match.sql(text(&arguments))
                    match.bind(into: &arguments)
                    return sql
                }
                return dialect.textMatch(text, op, options, pattern: .constant(constant), arguments: &arguments)
            }
            // A pattern read from a column binds nothing (resolution refuses a SUBQUERY there).
            var none: [Value] = []
            let patternSQL = term(pattern, arguments: &none)
            return dialect.textMatch(text, op, options, pattern: .sql(patternSQL), arguments: &arguments)
        case .oneOf(let left, let list, let options):
            // Nothing is in an empty list, NULL included (SQLite's `IN ()`, which PostgreSQL
            // does not parse).
            if list.isEmpty { return dialect.falseCondition }
            let column = term(left, folding: options, arguments: &arguments)
            arguments += list.map { fold($0, options) }
            return "\(column) IN (\(Array(repeating: dialect.placeholder, count: list.count).joined(separator: ", ")))"
        case .between(let left, let low, let high, let options):
            let column = term(left, folding: options, arguments: &arguments)
            arguments += [fold(low, options), fold(high, options)]
            return "\(column) BETWEEN \(dialect.placeholder) AND \(dialect.placeholder)"
        case .compare(let leftTerm, let op, let rightTerm, let options):
            let left = term(leftTerm, folding: options, arguments: &arguments)
            if case .value(.null) = rightTerm {
                return op == .equal ? "\(left) IS NULL" : "\(left) IS NOT NULL"
            }
            let right = term(rightTerm, folding: options, arguments: &arguments)
            switch op {
            case .equal: return dialect.isSame(left, right)
            case .notEqual: return dialect.isNotSame(left, right)
            default: return "\(left) \(op.rawValue) \(right)"
            }
        case .constant, .and, .or, .not, .quantified:
            preconditionFailure("unreachable: written above")
        }
    }

    /// A term as SQL: a column, a bound value, the row's primary key, or arithmetic on them;
    /// text folded as `options` say (a value folded here, a column by the dialect's function).
    static func term(_ term: Term, folding options: MatchOptions, aliases: [String: String], outer: [String: String],
                     dialect: any SQLDialect, arguments: inout [Value]) -> String {
        switch term {
        case .value(let value):
            arguments.append(fold(value, options))
            return dialect.placeholder
        case .path(let path), .outer(let path):
            let sql = column(path, term.isOuter ? outer : aliases, dialect: dialect, arguments: &arguments)
            return options.isEmpty || !term.isText ? sql : dialect.fold(sql, options)
        case .identity:
            return "\(aliases[""]!).\"Z_PK\""
        case .arithmetic(let a, let op, let b):
            let left = Self.term(a, folding: [], aliases: aliases, outer: outer, dialect: dialect, arguments: &arguments)
            let right = Self.term(b, folding: [], aliases: aliases, outer: outer, dialect: dialect, arguments: &arguments)
            return dialect.arithmetic(left, op, right)
        }
    }
}
