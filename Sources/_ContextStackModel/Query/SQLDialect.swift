import _ContextStackCore

/// What differs between the SQL of the databases a store can keep its rows in.
///
/// The predicate-to-SQL code (`CompiledQuery`, `AggregateQuery`) writes everything the
/// databases share — joins, `AND`/`OR`/`NOT`, comparisons, `IN`, `BETWEEN`, subqueries — and
/// asks its dialect for the rest, so a store on another database is one more conforming type,
/// not a fork of the generator. Every form here must keep the meaning `Docs/Predicates.md`
/// gives the predicate on every store: NULL equals NULL for `==`, ordering never matches
/// NULL, ascending order puts NULL first, text compares in binary order unless `[c]`/`[d]`.
///
/// For example, SQLite's `%"name" == "Monk"` is `t0."name" IS ?`; a database without `IS` on
/// values would say `t0."name" IS NOT DISTINCT FROM ?`.
package protocol SQLDialect: Sendable {
    /// The placeholder of a bound value. Values are bound in the order their placeholders
    /// appear in the finished statement (statements are assembled from fragments, so a
    /// database with numbered placeholders, `$1`, numbers them when the statement is prepared).
    var placeholder: String { get }
    /// Literals for a condition that is always or never true.
    var trueCondition: String { get }
    var falseCondition: String { get }
    /// `left` and `right` are the same value, NULL the same as NULL.
    func isSame(_ left: String, _ right: String) -> String
    /// `left` and `right` are not the same value (a value is not the same as NULL).
    func isNotSame(_ left: String, _ right: String) -> String
    /// `condition` is false or NULL: how ALL tests each member.
    func isNotTrue(_ condition: String) -> String
    /// Whether `textMatch` expresses `op` with `options` exactly as `TextMatch` evaluates it,
    /// with a constant pattern or one read from a column. A query that uses one it cannot
    /// selects a superset in SQL and filters it in memory (`CompiledQuery.filtersInMemory`).
    func canMatchText(_ op: TextOperator, _ options: MatchOptions, constantPattern: Bool) -> Bool
    /// A string operator on the text `value` writes (NULL when it is NULL), appending the
    /// values it binds to `arguments` in the order of its placeholders. `value` appends its
    /// own, so the dialect calls it where the text goes.
    func textMatch(_ value: (inout [Value]) -> String, _ op: TextOperator, _ options: MatchOptions, pattern: TextPattern,
                   arguments: inout [Value]) -> String
    /// A string operator on the value of a text attribute (a `String` or `URL` key, which holds
    /// text or NULL) with a constant pattern, written so that the database answers it itself
    /// — a range an index serves, a built-in substring search — with exactly `TextMatch`'s
    /// answers; `nil` to use `textMatch`. `column` says whether the value is the attribute's
    /// column itself (not a subquery or a computed text), which a range needs. Not for other
    /// values (an aggregate's alias in `having:`), on which a comparison or a built-in would not
    /// answer as `TextMatch` does.
    func textAttributeMatch(_ op: TextOperator, _ options: MatchOptions, constant: String, column: Bool) -> TextAttributeMatch?
    /// Whether `fold` folds text exactly as `TextMatch.fold` does, for comparisons with options
    /// (`name ==[c] 'ada'`).
    var canFold: Bool { get }
    /// The text `sql` with case and/or diacritics folded away, as `TextMatch.fold` does.
    func fold(_ sql: String, _ options: MatchOptions) -> String
    /// One `ORDER BY` term: NULL first ascending and last descending, text in binary order.
    func orderTerm(_ column: String, ascending: Bool) -> String
    /// `LIMIT`/`OFFSET` for a window, appending the values it binds to `arguments`.
    func window(limit: Int?, offset: Int, arguments: inout [Value]) -> String
    /// `function` over `column` (median and population standard deviation included; a
    /// database may need more than a function call, as PostgreSQL's
    /// `percentile_cont(0.5) WITHIN GROUP (ORDER BY …)` for the median).
    func aggregate(_ function: Select.Function, of column: String, kind: AttributeKind?) -> String
    /// `left op right` in `Double`, NULL for a division by zero (`Condition.ArithmeticOperator.apply`).
    func arithmetic(_ left: String, _ op: Condition.ArithmeticOperator, _ right: String) -> String
    /// Whether `arithmetic` writes `op` with exactly `apply`'s result; if not, comparisons with
    /// it are filtered in memory.
    func canCompute(_ op: Condition.ArithmeticOperator) -> Bool
    /// A collection operator over a member column (`*` for `@count`), with its empty-set value:
    /// 0 for a count and a sum, NULL for the others; a sum of whole numbers stays whole.
    func collectionAggregate(_ function: CollectionFunction, of column: String, kind: AttributeKind) -> String
    /// What every `UPDATE` of an entity row also sets: a store that keeps a row version for
    /// other processes and machines bumps it here; SQLite keeps none.
    var rowVersionAssignments: [String] { get }
    /// What a writer's `SELECT` of the rows a commit refers to ends with, so that no other
    /// transaction can delete them until the commit's ends: nothing on SQLite, whose writer
    /// holds the whole file; `FOR KEY SHARE` on PostgreSQL.
    var referenceLock: String { get }
    /// What a writer's `SELECT` of rows it is about to delete ends with, taken before it looks
    /// for what relates to them: nothing on SQLite (where the rows are not read for it at
    /// all); `FOR UPDATE` on PostgreSQL, which waits for transactions holding `referenceLock`
    /// on them, whose new references the look then finds.
    var deleteLock: String { get }
    /// The same for rows about to be updated (a delete rule nullifying them): nothing on
    /// SQLite, `FOR NO KEY UPDATE` on PostgreSQL, which leaves other writers' `referenceLock`
    /// alone.
    var updateLock: String { get }
}

/// How a dialect writes a string operator with a constant pattern on a text attribute
/// (`SQLDialect.textAttributeMatch`): the decision, the values it binds and its text apart, so
/// that a query of a known shape binds its values without writing the text again
/// (`CompiledQuery.windowSQL`).
package enum TextAttributeMatch {
    /// BEGINSWITH a constant prefix, without options, on a column, as the range of texts that
    /// begin with it (`column >= prefix AND column < successor`): a comparison an index on the
    /// column serves, where a function call per row reads every row. Exact on both stores,
    /// whose text comparison goes by bytes (SQLite's binary collation, PostgreSQL's "C"):
    /// UTF-8's byte order is the order of scalar values, and `TextMatch.prefixSuccessor` is
    /// the first text past every text that begins with `prefix` (none: no upper bound). A
    /// value that is not text is below every text on SQLite (so outside the range, as
    /// `TextMatch` has it), and NULL stays NULL. Only on a column: no index serves a subquery
    /// or a computed text, and the range would compute it twice.
    ///
    /// `typed` is how a bound text is written (PostgreSQL's `?::text`).
    case prefixRange(String, successor: String?, typed: String)
    /// CONTAINS as SQLite's own substring search, without a call into Swift per row: `instr`
    /// compares bytes (NUL included) at every character boundary, which for UTF-8 is every
    /// place a valid pattern can match (`TextMatch.contains`); NULL stays NULL, and an empty
    /// pattern is at position 1.
    case instr(String)

    /// The range of texts that begin with `prefix`.
    static func range(beginningWith prefix: String, typed: String) -> Self {
        .prefixRange(prefix, successor: TextMatch.prefixSuccessor(prefix), typed: typed)
    }

    /// Appends the values the match binds after its value's own.
    func bind(into arguments: inout [Value]) {
        switch self {
        case .prefixRange(let prefix, let successor, _):
            arguments.append(.text(prefix))
            if let successor { arguments.append(.text(successor)) }
        case .instr(let pattern):
            arguments.append(.text(pattern))
        }
    }

    /// The match on `value`, the SQL of the attribute.
    func sql(_ value: String) -> String {
        switch self {
        case .prefixRange(_, let successor, let typed):
            successor == nil ? "(\(value) >= \(typed))" : "(\(value) >= \(typed) AND \(value) < \(typed))"
        case .instr:
            "(instr(\(value), ?) > 0)"
        }
    }
}

/// The pattern of a string operator: a string to bind, or SQL that reads it (a column).
package enum TextPattern {
    case constant(String)
    case sql(String)
}

/// SQLite's dialect: `?` placeholders, `IS` for null-safe equality, booleans as 1 and 0, the
/// string operators, folding for comparisons with options, median and standard deviation as
/// functions ContextStack registers on every connection (`cs_text`, `cs_fold`, `cs_median`,
/// `cs_stddev`). SQLite already orders NULL first
/// ascending and compares text with the binary collation.
package struct SQLiteDialect: SQLDialect {
    package init() {}

    package var placeholder: String { "?" }
    package var rowVersionAssignments: [String] { [] }
    package var referenceLock: String { "" }
    package var deleteLock: String { "" }
    package var updateLock: String { "" }
    package var trueCondition: String { "1" }
    package var falseCondition: String { "0" }
    package func isSame(_ left: String, _ right: String) -> String { "\(left) IS \(right)" }
    package func isNotSame(_ left: String, _ right: String) -> String { "\(left) IS NOT \(right)" }
    package func isNotTrue(_ condition: String) -> String { "(\(condition)) IS NOT 1" }
    package func canMatchText(_ op: TextOperator, _ options: MatchOptions, constantPattern: Bool) -> Bool { true }
    package func textMatch(_ text: (inout [Value]) -> String, _ op: TextOperator, _ options: MatchOptions, pattern: TextPattern,
                           arguments: inout [Value]) -> String {
        arguments += [.integer(Int64(TextMatch.code(of: op))), .integer(Int64(options.rawValue))]
        let value = text(&arguments)
        switch pattern {
        case .constant(let text):
            arguments.append(.text(text))
            return "cs_text(?, ?, \(value), ?)"
        case .sql(let sql):
            return "cs_text(?, ?, \(value), \(sql))"
        }
    }
    /// BEGINSWITH as a range an index serves; CONTAINS as SQLite's own substring search
    /// (`TextAttributeMatch`).
    package func textAttributeMatch(_ op: TextOperator, _ options: MatchOptions, constant: String, column: Bool) -> TextAttributeMatch? {
        guard options.isEmpty else { return nil }
        switch op {
        case .beginsWith where column: return .range(beginningWith: constant, typed: "?")
        case .contains: return .instr(constant)
        default: return nil
        }
    }
    package var canFold: Bool { true }
    package func fold(_ sql: String, _ options: MatchOptions) -> String { "cs_fold(\(options.rawValue), \(sql))" }
    package func orderTerm(_ column: String, ascending: Bool) -> String { "\(column) \(ascending ? "ASC" : "DESC")" }
    /// SQLite's "no limit" is a negative one.
    package func window(limit: Int?, offset: Int, arguments: inout [Value]) -> String {
        arguments += [.integer(Int64(limit ?? -1)), .integer(Int64(offset))]
        return "LIMIT ? OFFSET ?"
    }
    package func arithmetic(_ left: String, _ op: Condition.ArithmeticOperator, _ right: String) -> String {
        switch op {
        case .power: "cs_pow(\(left), \(right))"
        case .divide: "(CAST(\(left) AS REAL) / NULLIF(CAST(\(right) AS REAL), 0))"
        default: "(CAST(\(left) AS REAL) \(op.rawValue) CAST(\(right) AS REAL))"
        }
    }
    package func canCompute(_ op: Condition.ArithmeticOperator) -> Bool { true }
    package func collectionAggregate(_ function: CollectionFunction, of column: String, kind: AttributeKind) -> String {
        switch function {
        case .count: "count(\(column))"
        case .sum: "coalesce(sum(\(column)), 0)"
        default: "\(function.rawValue)(\(column))"
        }
    }
    package func aggregate(_ function: Select.Function, of column: String, kind: AttributeKind?) -> String {
        let name = switch function {
        case .average: "avg"
        case .sum: "total"
        case .stdDev: "cs_stddev"
        case .min: "min"
        case .max: "max"
        case .median: "cs_median"
        case .count: "count"
        }
        return "\(name)(\(column))"
    }
}
