import Foundation
import _ContextStackCore

extension Condition {
    /// A condition from an NSPredicate-style format string and its arguments.
    ///
    /// For example:
    ///
    /// ```swift
    /// let people = try world.fetchAll(Person.self, .where("name LIKE[c] %@ AND (age > %@ OR friend.age BETWEEN {%@, %@})", "m*", 18, 1, 5))
    /// // SELECT … FROM "Person" AS t0 LEFT JOIN "Person" AS t1 ON t1."Z_PK" = t0."friend"
    /// //   WHERE (cs_text(?, ?, t0."name", ?) AND (t0."age" > ? OR t1."age" BETWEEN ? AND ?)) …
    /// ```
    ///
    /// The string builds the same condition as the operators on `Key`: `age > %@` is
    /// `%"age" > 18`, `name LIKE[c] %@` is `%"name"%.like("m*", options: .caseInsensitive)`,
    /// `ANY pets.name == 'Rex'` is `%"pets.name"%.any == "Rex"`, and so on. It understands:
    ///
    /// - comparisons `= == != <> < > <= >= =< =>`, `IN {…}`, `BETWEEN {low, high}`, and `LIKE`,
    ///   `CONTAINS`, `BEGINSWITH`, `ENDSWITH`, `MATCHES`, each with `[c]`, `[d]` or `[cd]`;
    /// - `AND`/`&&`, `OR`/`||`, `NOT`/`!` (NOT binds tightest, then AND, then OR) and parentheses;
    /// - `ANY`, `SOME`, `ALL`, `NONE` before a key path; `TRUEPREDICATE`, `FALSEPREDICATE`;
    /// - keys and dotted key paths (`friend.age`, `pets.@count`; `#in` for a key spelled like
    ///   a keyword), key-to-key comparisons (`name == location`), a value on either side (`18 < age`);
    /// - `nil`, `NULL`, `TRUE`, `FALSE`, `YES`, `NO`, integers (`-3`, `0x1F`), decimals (`2.5e3`),
    ///   `'…'` or `"…"` strings with `\n \t \r \0 \\ \' \" \uXXXX`, and `{…}` lists;
    /// - placeholders: `%@` a value (a String, a number, a Bool, a Date, Data, a UUID, a URL, a
    ///   Decimal, an enum with such raw values, a managed object, an `ObjectID`, `nil`, or an
    ///   array of these after IN or BETWEEN), `%K` a key path given as a String, `%d %i %ld %lld`
    ///   an integer, `%f %lf` a floating-point number.
    ///
    /// Keywords are case-insensitive.
    ///
    /// - Parameters:
    ///   - format: The predicate.
    ///   - arguments: One argument per placeholder, in order.
    /// - Returns: The condition. Building it never throws and never traps: a malformed string,
    ///   the wrong number of arguments or an argument of the wrong type gives a condition that
    ///   throws when it is used.
    /// - Throws: When used, `QueryError` with code `.invalidFormat` and `position` set to the
    ///   offset (in characters) of the offending character; its message shows the string with
    ///   a caret under that character and says what was expected there. For example, using
    ///   `.where("age >")` throws:
    ///
    ///   ```
    ///   Invalid format string at offset 5: expected a key or a value after '>', found the end of the string.
    ///       age >
    ///            ^
    ///   ```
    ///
    ///   The condition is then checked against the model like any other (`.unknownKey`,
    ///   `.typeMismatch`, `.unsupported`).
    public static func `where`(_ format: String, _ arguments: (any Sendable)?...) -> Condition {
        Self.where(format, argumentArray: arguments)
    }

    /// A condition from an NSPredicate-style format string and an array of arguments.
    ///
    /// For example:
    ///
    /// ```swift
    /// let arguments: [(any Sendable)?] = ["m*", 18]
    /// let people = try world.fetchAll(Person.self, .where("name LIKE[c] %@ AND age > %@", argumentArray: arguments))
    /// // SELECT … FROM "Person" AS t0 WHERE (cs_text(?, ?, t0."name", ?) AND t0."age" > ?) …
    /// ```
    ///
    /// - Parameters:
    ///   - format: The predicate, in the language `where(_:_:)` describes.
    ///   - arguments: One argument per placeholder, in order.
    /// - Returns: The condition; one that throws `QueryError(.invalidFormat)` when used, if the
    ///   string or its arguments are wrong.
    public static func `where`(_ format: String, argumentArray arguments: [(any Sendable)?]) -> Condition {
        switch FormatParser.parse(format, arguments) {
        case .success(let node): Condition(node)
        case .failure(let error): Condition(.invalid(error))
        }
    }
}

extension Condition {
    /// The condition with its variables (`$name` in a format string) replaced by values, as
    /// `NSPredicate.withSubstitutionVariables(_:)` does.
    ///
    /// For example:
    ///
    /// ```swift
    /// let template = Condition.where("name == $name AND age IN $ages")
    /// let monks = try world.fetchAll(Person.self, template.substituting(["name": "Monk", "ages": [18, 21]]))
    /// // … WHERE (t0."name" IS ? AND t0."age" IN (?, ?)) …
    /// ```
    ///
    /// A value takes what a `%@` argument takes: a String, a number, a Bool, a Date, Data, a
    /// UUID, a URL, a Decimal, an enum with such raw values, a managed object, an `ObjectID`,
    /// `nil`, or an array of these (after IN or BETWEEN). Variables without a value stay, and
    /// using the condition then throws `QueryError(.unsupported)` naming them; names in
    /// `variables` that the condition does not use are ignored.
    ///
    /// - Parameter variables: Values by variable name, without the `$`.
    /// - Returns: The condition; one that throws `QueryError(.invalidFormat)` when used, if a
    ///   value is of a type a predicate cannot use.
    public func substituting(_ variables: [String: (any Sendable)?]) -> Condition {
        do throws(QueryError) {
            return Condition(try Self.substitute(variables, in: node))
        } catch {
            return Condition(.invalid(error))
        }
    }

    private static func substitute(_ variables: [String: (any Sendable)?], in node: Node) throws(QueryError) -> Node {
        func side(_ expression: Expression) throws(QueryError) -> Expression {
            switch expression {
            case .arithmetic(let left, let op, let right):
                return .arithmetic(try side(left), op, try side(right))
            case .subquery(let relationship, let condition, let function, let member):
                return .subquery(relationship: relationship, condition: try substitute(variables, in: condition), function: function, member: member)
            case .listWithVariables(let items):
                // Each variable takes one value; the list is a list of values once all have one.
                var substituted: [Expression] = []
                var values: [Operand] = []
                for item in items {
                    let value = try side(item)
                    substituted.append(value)
                    switch value {
                    case .constant(let operand): values.append(operand)
                    case .list:
                        guard case .variable(let name) = item else { break }
                        throw QueryError(.invalidFormat, "The value for $\(name) is a list, and $\(name) is an item of a list: give it one value, or make the whole list one variable.")
                    default: break
                    }
                }
                return values.count == items.count ? .list(values) : .listWithVariables(substituted)
            default:
                break
            }
            guard case .variable(let name) = expression, let entry = variables[name] else { return expression }
            switch FormatParser.constant(for: entry.map { $0 as Any }) {
            case .value(let operand)?: return .constant(operand)
            case .list(let items)?: return .list(items)
            case nil:
                throw QueryError(.invalidFormat, "The value for $\(name) is \(FormatParser.describeArgument(entry)), \(FormatParser.supported).")
            }
        }
        switch node {
        case .expression(let left, let op, let right, let options):
            return simplified(try side(left), op, try side(right), options)
        case .and, .or:
            var operands: [Node] = []
            for operand in node.chain() { operands.append(try substitute(variables, in: operand)) }
            if case .and = node { return balanced(operands[...]) { .and($0, $1) } }
            return balanced(operands[...]) { .or($0, $1) }
        case .not(let inner): return .not(try substitute(variables, in: inner))
        case .quantified(let quantifier, let key, let inner): return .quantified(quantifier, key, try substitute(variables, in: inner))
        case .constant, .compare, .text, .oneOf, .between, .invalid: return node
        }
    }

    /// The node the operators on `Key` build for a key against values without options, so a
    /// substituted template works wherever a written-out condition does (`fetchOrCreate`);
    /// an `expression` node otherwise.
    private static func simplified(_ left: Expression, _ op: PredicateOperator, _ right: Expression, _ options: MatchOptions) -> Node {
        guard options.isEmpty, case .key(let key) = left else { return .expression(left, op, right, options) }
        switch (op, right) {
        case (.compare(let comparison), .constant(let operand)): return .compare(key, comparison, operand)
        case (.compare(let comparison), .key(let other)): return .compare(key, comparison, .key(other))
        case (.isIn, .list(let items)): return .oneOf(key, items)
        case (.between, .list(let items)) where items.count == 2: return .between(key, items[0], items[1])
        case (.text(let textOperator), .constant(.value(.text(let pattern), let kind))) where kind == .string || kind == .url:
            return .text(key, textOperator, pattern, [])
        default: return .expression(left, op, right, options)
        }
    }
}
