import _ContextStackCore

/// PostgreSQL's dialect, written so that every predicate keeps the meaning it has on SQLite
/// (`Docs/Predicates.md`), on the tables the PostgreSQL store creates (text columns in the
/// "C" collation, so comparisons and `ORDER BY` go by bytes):
///
/// - `==` and `!=` are null-safe: `IS NOT DISTINCT FROM`, `IS DISTINCT FROM`;
/// - ascending order puts NULL first and descending last, as SQLite does (`NULLS FIRST`,
///   `NULLS LAST`; PostgreSQL's own default is the reverse);
/// - the median is `percentile_cont(0.5)`, the standard deviation `stddev_pop`, and a sum is a
///   double that is 0 over no rows, like SQLite's `total`;
/// - the string operators without options translate exactly: CONTAINS is `strpos`,
///   BEGINSWITH a constant on a column the range of texts that begin with it (`TextAttributeMatch`,
///   which an index serves), otherwise `starts_with`, ENDSWITH compares the text's end, and LIKE's `*` and `?` become
///   `%` and `_` with PostgreSQL's own wildcards escaped. MATCHES (ICU regular expressions) and
///   the `[c]`/`[d]` folding have no exact PostgreSQL equivalent, so `canMatchText` and
///   `canFold` refuse them, and fetches filter those conditions in memory.
package struct PostgresDialect: SQLDialect {
    package init() {}

    package var placeholder: String { "?" }
    /// Every update adds one to the row's version (see `PostgresWriter`).
    package var rowVersionAssignments: [String] { ["\"Z_VERSION\" = \"Z_VERSION\" + 1"] }
    package var referenceLock: String { " FOR KEY SHARE" }
    package var deleteLock: String { " FOR UPDATE" }
    package var updateLock: String { " FOR NO KEY UPDATE" }
    package var trueCondition: String { "TRUE" }
    package var falseCondition: String { "FALSE" }
    package func isSame(_ left: String, _ right: String) -> String { "\(left) IS NOT DISTINCT FROM \(right)" }
    package func isNotSame(_ left: String, _ right: String) -> String { "\(left) IS DISTINCT FROM \(right)" }
    package func isNotTrue(_ condition: String) -> String { "(\(condition)) IS NOT TRUE" }

    /// LIKE needs its pattern rewritten, which only a constant allows.
    package func canMatchText(_ op: TextOperator, _ options: MatchOptions, constantPattern: Bool) -> Bool {
        op != .matches && options.isEmpty && (constantPattern || op != .like)
    }

    package func textMatch(_ text: (inout [Value]) -> String, _ op: TextOperator, _ options: MatchOptions, pattern: TextPattern,
                           arguments: inout [Value]) -> String {
        precondition(canMatchText(op, options, constantPattern: { if case .constant = pattern { true } else { false } }()),
                     "PostgresDialect cannot express \(op.rawValue)\(options.formatSuffix): CompiledQuery checks canMatchText before it writes SQL.")
        let value = text(&arguments)
        /// The pattern's SQL, binding it when it is a constant (once per use).
        func patternSQL(_ rewrite: (String) -> String = { $0 }) -> String {
            switch pattern {
            case .constant(let text):
                arguments.append(.text(rewrite(text)))
                return "?::text"
            case .sql(let sql):
                return sql
            }
        }
        switch op {
        case .contains:
            return "(strpos(\(value), \(patternSQL())) > 0)"
        case .beginsWith:
            return "starts_with(\(value), \(patternSQL()))"
        case .endsWith:
            return "(right(\(value), char_length(\(patternSQL()))) = \(patternSQL()))"
        case .like:
            return "(\(value) LIKE \(patternSQL(Self.likePattern)))"
        case .matches:
            preconditionFailure("unreachable: canMatchText refuses MATCHES")
        }
    }

    /// BEGINSWITH as a range an index serves (`TextAttributeMatch.prefixRange`); the other
    /// operators are exact in `textMatch` already.
    package func textAttributeMatch(_ op: TextOperator, _ options: MatchOptions, constant: String, column: Bool) -> TextAttributeMatch? {
        guard op == .beginsWith, options.isEmpty, column else { return nil }
        return .range(beginningWith: constant, typed: "?::text")
    }

    /// PostgreSQL has no folding that matches `TextMatch.fold` (Unicode case folding after
    /// canonical decomposition): comparisons with options are filtered in memory.
    package var canFold: Bool { false }
    package func fold(_ sql: String, _ options: MatchOptions) -> String {
        preconditionFailure("PostgresDialect cannot fold text: CompiledQuery checks canFold before it writes SQL.")
    }

    /// A ContextStack LIKE pattern (`*` any run, `?` one character, a backslash making the
    /// next character literal, everything else itself) as a PostgreSQL LIKE pattern with `\` as
    /// its escape.
    static func likePattern(_ pattern: String) -> String {
        var result = ""
        result.unicodeScalars.reserveCapacity(pattern.unicodeScalars.count)
        var escaped = false
        for scalar in pattern.unicodeScalars {
            switch (escaped, scalar) {
            case (false, "\\"): escaped = true; continue
            case (false, "*"): result += "%"
            case (false, "?"): result += "_"
            case (_, "%"), (_, "_"), (_, "\\"): result += "\\" + String(scalar)
            default: result.unicodeScalars.append(scalar)
            }
            escaped = false
        }
        if escaped { result += "\\\\" }
        return result
    }

    package func orderTerm(_ column: String, ascending: Bool) -> String {
        ascending ? "\(column) ASC NULLS FIRST" : "\(column) DESC NULLS LAST"
    }

    /// PostgreSQL refuses a negative limit; `LIMIT NULL` is no limit.
    package func window(limit: Int?, offset: Int, arguments: inout [Value]) -> String {
        arguments += [limit.map { .integer(Int64($0)) } ?? .null, .integer(Int64(offset))]
        return "LIMIT ? OFFSET ?"
    }

    /// `float8` arithmetic is IEEE arithmetic, as Swift's, but for two things. A NaN result
    /// (infinity minus infinity, zero times infinity) stays NaN, which PostgreSQL sorts above
    /// every number and takes as equal to itself, where SQLite and the in-memory evaluation
    /// make it NULL: so it is made NULL here too. And a result past a double's range throws
    /// (`22003`) where they answer infinity (Docs/Postgres.md). `power` differs more (it refuses
    /// a negative base with a fraction, and zero to a negative power, where Swift answers NaN
    /// and infinity), so `**` is filtered in memory.
    package func arithmetic(_ left: String, _ op: Condition.ArithmeticOperator, _ right: String) -> String {
        switch op {
        case .power: "power(CAST(\(left) AS float8), CAST(\(right) AS float8))"
        case .divide: "NULLIF(CAST(\(left) AS float8) / NULLIF(CAST(\(right) AS float8), 0), 'NaN')"
        default: "NULLIF(CAST(\(left) AS float8) \(op.rawValue) CAST(\(right) AS float8), 'NaN')"
        }
    }
    package func canCompute(_ op: Condition.ArithmeticOperator) -> Bool { op != .power }
    /// `sum` of `bigint` is `numeric` and `avg` always is: cast back to the column's kind.
    package func collectionAggregate(_ function: CollectionFunction, of column: String, kind: AttributeKind) -> String {
        switch function {
        case .count: "count(\(column))"
        case .sum: "CAST(coalesce(sum(\(column)), 0) AS \(kind == .int ? "bigint" : "float8"))"
        case .avg: "CAST(avg(\(column)) AS float8)"
        default: "\(function.rawValue)(\(column))"
        }
    }
    package func aggregate(_ function: Select.Function, of column: String, kind: AttributeKind?) -> String {
        // PostgreSQL has no `min` or `max` of `bytea` (data, UUIDs): the first of the values in
        // byte order, as SQLite's `min` and `max` of blobs compare them.
        let bytes = kind == .data || kind == .uuid
        return switch function {
        case .average: "avg(\(column))"
        case .sum: "coalesce(sum(\(column)), 0)::float8"
        case .stdDev: "stddev_pop(\(column))"
        case .min where bytes: "(array_agg(\(column) ORDER BY \(column)) FILTER (WHERE \(column) IS NOT NULL))[1]"
        case .max where bytes: "(array_agg(\(column) ORDER BY \(column) DESC) FILTER (WHERE \(column) IS NOT NULL))[1]"
        case .min: "min(\(column))"
        case .max: "max(\(column))"
        case .median: "percentile_cont(0.5) WITHIN GROUP (ORDER BY \(column))"
        case .count: "count(\(column))"
        }
    }
}
