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
