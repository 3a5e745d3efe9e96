import _ContextStackCore

/// An aggregate query compiled to one SQL statement: selected keys and aggregates, a condition,
/// grouping, a condition on the groups, order and window. Everything runs in SQL; no row is
/// fetched into objects.
struct AggregateQuery {
    let sql: CompiledQuery.SQL

    init(entity: ResolvedEntity, select: Select, condition: Condition?, orderBy: OrderBy?, groupBy: KeyList?,
         having: Condition?, options: FetchOptions, dialect: any SQLDialect = SQLiteDialect()) throws(QueryError) {
        guard !select.terms.isEmpty else {
            throw QueryError(.unsupported, "A query of \(entity.name) needs something to select: .select(\"key\") or an aggregate.", entity: entity.name)
        }
        // The options a query honours: the window, `.distinct`, `.noSubEntities`, and `.tweak`.
        let request = FetchRequest(condition: condition, orderBy: orderBy, options: options)
        let groupKeys = groupBy?.keys.map(\.path) ?? []
        if having != nil && groupKeys.isEmpty && !select.terms.contains(where: { $0.function != nil }) {
            throw QueryError(.unsupported, "A query of \(entity.name) with having: needs groupBy: or an aggregate in its selection: having filters groups.", entity: entity.name)
        }
        let base = try CompiledQuery(entity: entity, condition: request.condition, orderBy: nil,
                                     extraKeys: select.terms.map(\.key) + groupKeys,
                                     includesSubEntities: request.includesSubEntities, dialect: dialect)
        try base.requireSQLOnly(for: "an aggregate query")
        var paths: [String: ResolvedPath] = [:]
        for path in base.extraPaths { paths[path.key] = path }
        var columns: [String] = []
        /// Each alias's expression, for HAVING: SQLite would take a name there for a column of
        /// the table before an alias of the selection, and PostgreSQL knows output names only
        /// in `ORDER BY`.
        var expressions: [String: String] = [:]
        let aggregates = !groupKeys.isEmpty || select.terms.contains { $0.function != nil }
        for term in select.terms {
            let path = paths[term.key]!
            if let function = term.function {
                guard path.leaf.isAttribute || path.collection != nil || function == .count else {
                    throw QueryError(.typeMismatch, "\(function.rawValue)(\(term.key)) on \(entity.name): '\(term.key)' is a relationship; aggregate an attribute.", key: term.key, entity: entity.name)
                }
                if let kind = path.kind, kind == .decimal && function != .count {
                    throw QueryError(.unsupported, "\(function.rawValue)(\(term.key)) on \(entity.name): decimals are stored as text, which SQL cannot aggregate as numbers.", key: term.key, entity: entity.name)
                }
                if function != .count && function != .min && function != .max, let kind = path.kind, !kind.isNumeric && kind != .date {
                    throw QueryError(.typeMismatch, "\(function.rawValue)(\(term.key)) on \(entity.name): '\(term.key)' is a \(kind.rawValue) attribute, not a number.", key: term.key, entity: entity.name)
                }
                expressions[term.alias] = dialect.aggregate(function, of: base.columnSQL(path), kind: path.kind)
            } else {
                // One meaning on every store: SQLite would give an arbitrary row's value, and
                // PostgreSQL refuses the query.
                if aggregates && !groupKeys.contains(term.key) {
                    throw QueryError(.unsupported, "A query of \(entity.name) selects '\(term.key)' beside \(groupKeys.isEmpty ? "aggregates" : "groups") without grouping by it, so it has no one value per row: add it to groupBy:, or aggregate it (.max(\"\(term.key)\")).", key: term.key, entity: entity.name)
                }
                expressions[term.alias] = base.columnSQL(path)
            }
            columns.append("\(expressions[term.alias]!) AS \(term.alias.quotedIdentifier)")
        }
        var from = base.fromWhere()
        var text = "SELECT \(request.distinct ? "DISTINCT " : "")\(columns.joined(separator: ", ")) \(from.text)"
        if !groupKeys.isEmpty {
            text += " GROUP BY " + groupKeys.map { base.columnSQL(paths[$0]!) }.joined(separator: ", ")
        }
        let aliases = Set(select.terms.map(\.alias))
        // Order and having name what each result row has: an alias, or a grouped key (a key
        // that is only aggregated has no one value per row).
        let named = { (key: String) throws(QueryError) -> String in
            if aliases.contains(key) { return key.quotedIdentifier }
            if groupKeys.contains(key), let path = paths[key] { return base.columnSQL(path) }
            throw QueryError(.unknownKey, "'\(key)' is neither an alias of the query's selection (\(aliases.sorted().joined(separator: ", "))) nor a grouped key of \(entity.name).", key: key, entity: entity.name)
        }
        if let having {
            let havingNamed = { (key: String) throws(QueryError) -> String in
                if let expression = expressions[key] { return expression }
                return try named(key)
            }
            text += " HAVING " + (try Self.sql(having.node, named: havingNamed, dialect: dialect, arguments: &from.arguments))
        }
        if let terms = request.orderBy?.terms, !terms.isEmpty {
            var order: [String] = []
            for term in terms {
                if let error = term.invalid { throw error }
                if request.distinct && !aliases.contains(term.key) {
                    throw QueryError(.unsupported, "A .distinct query of \(entity.name) orders by '\(term.key)', which it does not select: select it too, or order by what it selects.", key: term.key, entity: entity.name)
                }
                order.append(dialect.orderTerm(try named(term.key), ascending: term.ascending))
            }
            text += " ORDER BY " + order.joined(separator: ", ")
        }
        if request.limit != nil || request.offset > 0 {
            text += " " + dialect.window(limit: request.limit, offset: request.offset, arguments: &from.arguments)
        }
        sql = CompiledQuery.SQL(text: text, arguments: from.arguments)
    }

    /// A condition over aliases (and grouped keys), for HAVING: values are bound as given.
    private static func sql(_ node: Condition.Node, named: (String) throws(QueryError) -> String,
                            dialect: any SQLDialect, arguments: inout [Value]) throws(QueryError) -> String {
        func operand(_ operand: Condition.Operand) throws(QueryError) -> String {
            switch operand {
            case .value(let value, _):
                arguments.append(value)
                return dialect.placeholder
            case .key(let key):
                return try named(key)
            case .object(let id):
                arguments.append(.integer(id.primaryKey))
                return dialect.placeholder
            }
        }
        switch node {
        case .constant(let value): return value ? dialect.trueCondition : dialect.falseCondition
        case .and, .or:
            // Balanced, so a long chain nests log n deep in SQL too.
            let word = if case .and = node { "AND" } else { "OR" }
            var operands: [String] = []
            for operand in node.chain() { operands.append(try sql(operand, named: named, dialect: dialect, arguments: &arguments)) }
            return balanced(operands[...]) { "(\($0) \(word) \($1))" }
        case .not(let a): return "(NOT \(try sql(a, named: named, dialect: dialect, arguments: &arguments)))"
        case .compare(let key, let op, let right):
            let left = try named(key)
            if case .value(.null, _) = right {
                guard !op.isOrdering else {
                    throw QueryError(.unsupported, "having: \(key) \(op.rawValue) nil never matches: use == nil or != nil.", key: key)
                }
                return op == .notEqual ? "\(left) IS NOT NULL" : "\(left) IS NULL"
            }
            let rhs = try operand(right)
            switch op {
            case .equal: return dialect.isSame(left, rhs)
            case .notEqual: return dialect.isNotSame(left, rhs)
            default: return "\(left) \(op.rawValue) \(rhs)"
            }
        case .between(let key, let low, let high):
            let left = try named(key)
            return "\(left) BETWEEN \(try operand(low)) AND \(try operand(high))"
        case .oneOf(let key, let list):
            let left = try named(key)
            // `IN ()` is SQLite's, not PostgreSQL's: an empty list matches nothing.
            guard !list.isEmpty else { return dialect.falseCondition }
            var items: [String] = []
            for item in list { items.append(try operand(item)) }
            return "\(left) IN (\(items.joined(separator: ", ")))"
        case .text(let key, let op, let pattern, let options):
            let left = try named(key)
            guard dialect.canMatchText(op, options, constantPattern: true) else {
                throw QueryError(.unsupported, "having: \(key) \(op.rawValue)\(options.formatSuffix) cannot run in this store's SQL yet: only the SQLite store evaluates MATCHES and the [c] and [d] options of the string operators.", key: key)
            }
            return dialect.textMatch({ _ in left }, op, options, pattern: .constant(pattern), arguments: &arguments)
        case .quantified(let quantifier, let key, _):
            throw QueryError(.unsupported, "\(quantifier.rawValue) \(key) is not allowed in having:.", key: key)
        case .expression:
            throw QueryError(.unsupported, "having: \(Condition(node)) is not allowed: having: compares the selection's aliases and grouped keys with values, without options, SELF or variables.")
        case .invalid(let error):
            throw error
        }
    }
}

extension ContextCore {
    /// Runs an aggregate query on what is committed: commits still on their way to SQLite are
    /// waited for first, so the answer includes every commit made before the call.
    package func query<T: ManagedObject>(_ type: T.Type, _ select: Select, _ condition: Condition?, orderBy: OrderBy?,
                                 groupBy: KeyList?, having: Condition?, options: FetchOptions) throws -> [Row] {
        checkExecution("query(\(T.self).self, …)")
        return try store.aggregate(entity: graph.entity(for: type), select: select, condition: condition, orderBy: orderBy,
                                   groupBy: groupBy, having: having, options: options)
    }
}

extension ObjectStore {
    /// Aggregate rows of `entity`, after every commit handed to the store before the call is
    /// written (SQL computes them over stored rows) — waited for here unless the caller already
    /// did (`awaitQueuedWritten`).
    package func aggregate(entity: ResolvedEntity, select: Select, condition: Condition?, orderBy: OrderBy?,
                           groupBy: KeyList?, having: Condition?, options: FetchOptions, waitsForQueued: Bool = true) throws -> [Row] {
        let query = try AggregateQuery(entity: entity, select: select, condition: condition, orderBy: orderBy,
                                       groupBy: groupBy, having: having, options: options, dialect: dialect)
        if waitsForQueued { waitUntilQueuedWritten() }
        let columns = select.terms.map(\.alias)
        return try read { session in
            var rows: [Row] = []
            try session.connection.select(query.sql.text, query.sql.arguments) { row in
                rows.append(Row(columns: columns, values: (0..<columns.count).map(row.value)))
            }
            return rows
        }
    }
}
