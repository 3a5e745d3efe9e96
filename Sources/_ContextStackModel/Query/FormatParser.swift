import Foundation
import _ContextStackCore

/// Parses an NSPredicate-style format string into a condition node: the engine behind
/// `Condition.where(_:_:)`.
///
/// A lexer and a recursive-descent parser over the string's `Character`s, so every position is
/// a character offset. The grammar, loosest binding first:
///
/// ```
/// predicate  := or END
/// or         := and ((OR | ||) and)*
/// and        := not ((AND | &&) not)*
/// not        := (NOT | !)* primary
/// primary    := '(' or ')' | TRUEPREDICATE | FALSEPREDICATE | comparison
/// comparison := [ANY | SOME | ALL | NONE] expression operator expression
/// operator   := = == != <> < > <= >= =< => | IN | BETWEEN
///             | (LIKE | CONTAINS | BEGINSWITH | ENDSWITH | MATCHES) ['[' c | d | cd ']']
/// expression := product (('+' | '-') product)*
/// product    := power (('*' | '/') power)*
/// power      := operand ['**' power]
/// operand    := keyPath | value | SELF | SELF.keyPath | $name | $name.keyPath | now() | '(' expression ')'
///             | SUBQUERY '(' keyPath ',' $name ',' or ')' '.' @name ['.' name]
///             | '{' [value (',' value)*] '}'
/// keyPath    := (name | #name | %K) ('.' (name | @name | #name | %K))*
/// value      := nil | NULL | TRUE | FALSE | YES | NO | ['-'] number | 'string' | "string"
///             | %@ | %d | %i | %ld | %lld | %f | %lf
/// ```
///
/// Keywords are case-insensitive; `#name` is a key even when `name` is a keyword. Parsing never
/// traps: every problem is a `QueryError(.invalidFormat)` with the offset of the offending
/// character. Nesting (parentheses, `NOT`s, chains of `AND`/`OR`) is bounded by `maxDepth`, so
/// a hostile string is an error rather than a stack overflow, and the node it builds stays
/// shallow enough for resolution, SQL generation and evaluation, which all recurse.
struct FormatParser {
    /// How deep the built condition, and the parentheses that build it, may nest.
    static let maxDepth = 200

    /// A parse error: where, and what was expected there.
    struct Failure: Error {
        let position: Int
        let reason: String
    }

    /// Parses `format` with its arguments; a failure is a `QueryError(.invalidFormat)` with
    /// its `position` set and a message showing a caret under the offending character.
    static func parse(_ format: String, _ arguments: [(any Sendable)?]) -> Result<Condition.Node, QueryError> {
        var parser = FormatParser(characters: Array(format), arguments: arguments)
        do throws(Failure) {
            return .success(try parser.parsePredicate())
        } catch {
            var failure = QueryError(.invalidFormat, message(for: error, in: parser.characters))
            failure.position = error.position
            return .failure(failure)
        }
    }

    // MARK: - State

    let characters: [Character]
    let arguments: [(any Sendable)?]
    /// The lexer's position in `characters`.
    var offset = 0
    /// The token being looked at, and the one before it (for messages).
    var token = Token(kind: .end, start: 0, end: 0)
    var previous: Token?
    /// How many arguments the placeholders so far have taken.
    var argumentsUsed = 0
    /// Open parentheses around the current position.
    var nesting = 0
    /// The variables of the SUBQUERYs around the current position, innermost last.
    var subqueryVariables: [String] = []
    /// The '('s that failed to parse as a group of predicates, by offset, with the state they
    /// were tried in: `parsePrimary` tries each once. (A SUBQUERY in a parenthesised operand
    /// parses predicates again, so trying every '(' both ways at every level was 2ⁿ work for
    /// n such levels.) Kept across the parser's backtracking (`backtrack(to:)`).
    var failedGroups: [Int: (nesting: Int, argumentsUsed: Int, failure: Failure)] = [:]
    /// How many times a '(' was parsed as a group, backtracking included (for tests).
    var groupsTried = 0

    init(characters: [Character], arguments: [(any Sendable)?]) {
        self.characters = characters
        self.arguments = arguments
    }

    // MARK: - Tokens

    enum Symbol: Equatable {
        case openParen, closeParen, openBrace, closeBrace, openBracket, closeBracket, comma, dot, minus
        case comparison(ComparisonOperator)
        /// `+`, `*`, `/`, `**` (`-` is `minus`, which also signs a number).
        case arithmetic(Condition.ArithmeticOperator)
        case and, or, not
    }

    enum Placeholder {
        /// `%@`: any value, or an array for IN and BETWEEN.
        case value
        /// `%K`: a key path.
        case key
        /// `%d %i %ld %li %lld %lli`.
        case integer
        /// `%f %lf`.
        case double
    }

    enum TokenKind {
        /// A name, and the keyword it spells if it does.
        case word(String, Keyword?)
        /// `#name`: a name, even when it is spelled like a keyword.
        case escapedWord(String)
        /// `@count`, with its `@`.
        case atWord(String)
        /// `$name`, without its `$`.
        case variable(String)
        /// An integer literal's magnitude (the sign is a separate `-`).
        case integer(UInt64)
        case decimal(Double)
        case string(String)
        case placeholder(Placeholder)
        case symbol(Symbol)
        /// A character that starts no token.
        case unknown
        case end
    }

    struct Token {
        var kind: TokenKind
        /// The offsets of the token's first character and one past its last.
        var start: Int
        var end: Int
    }

    enum Keyword: String {
        case and = "AND", or = "OR", not = "NOT"
        case any = "ANY", all = "ALL", some = "SOME", none = "NONE"
        case isIn = "IN", between = "BETWEEN"
        case like = "LIKE", contains = "CONTAINS", beginsWith = "BEGINSWITH", endsWith = "ENDSWITH", matches = "MATCHES"
        case truePredicate = "TRUEPREDICATE", falsePredicate = "FALSEPREDICATE", evaluatedObject = "SELF"
        case nilLiteral = "NIL", nullLiteral = "NULL", trueLiteral = "TRUE", falseLiteral = "FALSE"
        case yesLiteral = "YES", noLiteral = "NO"
        case subquery = "SUBQUERY"

        /// The keyword a word spells, in any case.
        init?(_ word: String) {
            guard word.utf8.count <= 14, word.utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
            // ASCII upper case, byte by byte.
            self.init(rawValue: String(decoding: word.utf8.map { $0 >= 0x61 && $0 <= 0x7A ? $0 - 0x20 : $0 }, as: UTF8.self))
        }

        var quantifier: Quantifier? {
            switch self {
            case .any, .some: .any
            case .all: .all
            case .none: Quantifier.none
            default: nil
            }
        }

        var textOperator: TextOperator? {
            switch self {
            case .like: .like
            case .contains: .contains
            case .beginsWith: .beginsWith
            case .endsWith: .endsWith
            case .matches: .matches
            default: nil
            }
        }
    }

    func keyword(_ token: Token) -> Keyword? {
        if case .word(_, let keyword) = token.kind { keyword } else { nil }
    }

    // MARK: - Parser

    /// A parsed predicate and the depth of its node.
    struct Parsed {
        var node: Condition.Node
        var depth: Int
    }

    /// An operator and the options written after it (`==[c]`).
    struct OperatorWithOptions {
        var op: Condition.PredicateOperator
        var options: MatchOptions
    }

    /// One side of a comparison.
    struct Operand {
        enum Kind {
            case key(String)
            case constant(Condition.Operand)
            case list([Condition.Operand])
            /// A list with variables among its items: `Condition.Expression.listWithVariables`.
            case listWithVariables([Condition.Expression])
            /// `SELF`.
            case evaluatedObject
            /// `$name`.
            case variable(String)
            /// Arithmetic, `now()`, a SUBQUERY, or a key of the object outside a SUBQUERY.
            case expression(Condition.Expression)

            /// `{…}`, with or without variables among its items.
            var isList: Bool {
                switch self {
                case .list, .listWithVariables: true
                default: false
                }
            }
        }

        /// The operand as a side of `Condition.Node.expression`.
        var expression: Condition.Expression {
            switch kind {
            case .key(let path): .key(path)
            case .constant(let value): .constant(value)
            case .list(let items): .list(items)
            case .listWithVariables(let items): .listWithVariables(items)
            case .evaluatedObject: .evaluatedObject
            case .variable(let name): .variable(name)
            case .expression(let expression): expression
            }
        }
        var kind: Kind
        var start: Int
        /// What it is, for messages: "the key 'age'", "the string 'x'", "the argument for %@ (an Int)".
        var what: String
        /// How deeply the expression nests (arithmetic, SUBQUERY conditions).
        var depth = 0
    }

    mutating func parsePredicate() throws(Failure) -> Condition.Node {
        try advance()
        previous = nil
        if case .end = token.kind {
            throw Failure(position: 0, reason: "the format string is empty: expected a predicate such as \"name == %@\"")
        }
        let result = try parseChain(or: true)
        switch token.kind {
        case .end: break
        case .symbol(.closeParen): throw fail(token, "unbalanced ')': there is no '(' for it to close")
        default: throw fail(token, "expected AND, OR or the end of the string\(after), found \(describe(token))")
        }
        // Arguments beyond the placeholders are ignored, as NSPredicate ignores them.
        return result.node
    }

    func isJoiner(or: Bool) -> Bool {
        switch token.kind {
        case .symbol(.or): or
        case .symbol(.and): !or
        default: keyword(token) == (or ? .or : .and)
        }
    }

    /// `a OR b OR …` (or `a AND b AND …`), left-associative like `||` and `&&`.
    mutating func parseChain(or: Bool) throws(Failure) -> Parsed {
        var terms = [try or ? parseChain(or: false) : parseNot()]
        var joiner: Token?
        while isJoiner(or: or) {
            joiner = joiner ?? token
            try advance()
            terms.append(try or ? parseChain(or: false) : parseNot())
        }
        guard let joiner else { return terms[0] }
        return try join(terms, or: or, at: joiner)
    }

    /// Joins a chain left-deep, as `a && b && c` does; a chain too long for that is balanced
    /// instead (the same meaning: AND and OR are associative, SQL's unknown included).
    func join(_ terms: [Parsed], or: Bool, at joiner: Token) throws(Failure) -> Parsed {
        func pair(_ a: Parsed, _ b: Parsed) -> Parsed {
            Parsed(node: or ? .or(a.node, b.node) : .and(a.node, b.node), depth: max(a.depth, b.depth) + 1)
        }
        // Measure before building: a deep node is itself a hazard (its release recurses).
        var depth = terms[0].depth
        for term in terms.dropFirst() { depth = max(depth, term.depth) + 1 }
        if depth <= Self.maxDepth {
            return terms.dropFirst().reduce(terms[0], pair)
        }
        func balanced(_ slice: ArraySlice<Parsed>) -> Parsed {
            if slice.count == 1 { return slice[slice.startIndex] }
            let middle = slice.startIndex + slice.count / 2
            return pair(balanced(slice[..<middle]), balanced(slice[middle...]))
        }
        let result = balanced(terms[...])
        guard result.depth <= Self.maxDepth else { throw tooDeep(joiner) }
        return result
    }

    mutating func parseNot() throws(Failure) -> Parsed {
        var nots: [Token] = []
        while true {
            if case .symbol(.not) = token.kind {} else if keyword(token) == .not {} else { break }
            guard nots.count < Self.maxDepth else { throw tooDeep(token) }
            nots.append(token)
            try advance()
        }
        var result = try parsePrimary()
        for not in nots.reversed() {
            guard result.depth < Self.maxDepth else { throw tooDeep(not) }
            result = Parsed(node: .not(result.node), depth: result.depth + 1)
        }
        return result
    }

    mutating func parsePrimary() throws(Failure) -> Parsed {
        if case .symbol(.openParen) = token.kind {
            // A parenthesis groups a predicate, or starts an arithmetic operand (`(age + 1) * 2
            // > 30`): try the first, then the second, and report whichever got further.
            let saved = self
            let grouped: Failure
            if let known = failedGroups[token.start], known.nesting == nesting, known.argumentsUsed == argumentsUsed {
                grouped = known.failure
            } else {
                do throws(Failure) {
                    return try parseGroup()
                } catch {
                    grouped = error
                }
            }
            backtrack(to: saved)
            failedGroups[token.start] = (nesting, argumentsUsed, grouped)
            do throws(Failure) {
                return try parseComparison()
            } catch let compared {
                throw compared.position >= grouped.position ? compared : grouped
            }
        }
        switch keyword(token) {
        case .truePredicate:
            try advance()
            return Parsed(node: .constant(true), depth: 1)
        case .falsePredicate:
            try advance()
            return Parsed(node: .constant(false), depth: 1)
        default:
            return try parseComparison()
        }
    }

    /// `( predicate )`.
    /// Goes back to `state`, keeping what was learned since (`failedGroups`).
    mutating func backtrack(to state: FormatParser) {
        let (learned, tried) = (failedGroups, groupsTried)
        self = state
        (failedGroups, groupsTried) = (learned, tried)
    }

    mutating func parseGroup() throws(Failure) -> Parsed {
        let open = token
        groupsTried += 1
        nesting += 1
        guard nesting <= Self.maxDepth else { throw tooDeep(open) }
        try advance()
        let inner = try parseChain(or: true)
        guard case .symbol(.closeParen) = token.kind else {
            throw fail(token, "expected AND, OR or ')' to close the '(' at offset \(open.start), found \(describe(token))")
        }
        try advance()
        nesting -= 1
        return inner
    }

    mutating func parseComparison() throws(Failure) -> Parsed {
        var quantifier: Quantifier?
        var quantifierToken = token
        if let found = keyword(token)?.quantifier {
            let spelled = spelling(token)
            quantifier = found
            quantifierToken = token
            try advance()
            _ = try skipSelfPrefix()
            let isVariable = if case .variable = token.kind { true } else { false }
            guard startsKeyPath(token) || (isVariable && !subqueryVariables.isEmpty) else {
                throw fail(token, "expected a key path through a to-many relationship after \(spelled) (as in ANY pets.name == 'Rex'), found \(describe(token))")
            }
        }
        let left = try parseExpression()
        let operatorToken = token
        let written = try parseOperator()
        let right = try parseExpression()
        let node = try build(left, written, spelling(operatorToken), right, quantified: quantifier != nil)
        let depth = max(left.depth, right.depth) + 1
        guard depth < Self.maxDepth else { throw tooDeep(operatorToken) }
        guard let quantifier else { return Parsed(node: node, depth: depth) }
        guard case .key(let path) = left.kind else {
            throw Failure(position: left.start, reason: "\(spelling(quantifierToken)) needs a key path of this object's to-many relationship on its left, found \(left.what)")
        }
        return Parsed(node: .quantified(quantifier, path, node), depth: depth + 1)
    }

    // MARK: - Expressions

    /// `product (('+' | '-') product)*`.
    mutating func parseExpression() throws(Failure) -> Operand {
        var left = try parseProduct()
        while true {
            let op: Condition.ArithmeticOperator
            switch token.kind {
            case .symbol(.arithmetic(.add)): op = .add
            case .symbol(.minus): op = .subtract
            default: return left
            }
            let operatorToken = token
            try advance()
            left = try combine(left, op, try parseProduct(), at: operatorToken)
        }
    }

    /// `power (('*' | '/') power)*`.
    mutating func parseProduct() throws(Failure) -> Operand {
        var left = try parsePower()
        while case .symbol(.arithmetic(let op)) = token.kind, op == .multiply || op == .divide {
            let operatorToken = token
            try advance()
            left = try combine(left, op, try parsePower(), at: operatorToken)
        }
        return left
    }

    /// `atom ['**' power]`: right-associative, as in Foundation (`2 ** 3 ** 2` is 2 ** 9).
    mutating func parsePower() throws(Failure) -> Operand {
        let base = try parseAtom()
        guard case .symbol(.arithmetic(.power)) = token.kind else { return base }
        let operatorToken = token
        nesting += 1
        guard nesting <= Self.maxDepth else { throw tooDeep(operatorToken) }
        try advance()
        let exponent = try parsePower()
        nesting -= 1
        return try combine(base, .power, exponent, at: operatorToken)
    }

    /// `left op right`, for operands that are numbers: keys, values, other arithmetic.
    func combine(_ left: Operand, _ op: Condition.ArithmeticOperator, _ right: Operand, at token: Token) throws(Failure) -> Operand {
        for operand in [left, right] {
            switch operand.kind {
            case .key, .variable, .expression, .constant(.value): continue
            case .constant(.key): continue
            default:
                throw Failure(position: operand.start, reason: "\(op.rawValue) takes numbers and dates, found \(operand.what)")
            }
        }
        let depth = max(left.depth, right.depth) + 1
        guard depth < Self.maxDepth else { throw tooDeep(token) }
        return Operand(kind: .expression(.arithmetic(left.expression, op, right.expression)), start: left.start,
                       what: "the expression at offset \(left.start)", depth: depth)
    }

    /// An operand: a key, a value, a list, a variable, `now()`, a SUBQUERY, or `( expression )`.
    mutating func parseAtom() throws(Failure) -> Operand {
        switch token.kind {
        case .symbol(.openParen):
            let open = token
            nesting += 1
            guard nesting <= Self.maxDepth else { throw tooDeep(open) }
            try advance()
            var inner = try parseExpression()
            guard case .symbol(.closeParen) = token.kind else {
                throw fail(token, "expected an operator or ')' to close the '(' at offset \(open.start), found \(describe(token))")
            }
            try advance()
            nesting -= 1
            inner.start = open.start
            return inner
        case .word(let word, nil) where word.lowercased() == "now":
            // `now()`; `now` alone is a key.
            let saved = self
            try advance()
            guard case .symbol(.openParen) = token.kind else {
                self = saved
                return try parseOperand()
            }
            let start = saved.token.start
            try advance()
            guard case .symbol(.closeParen) = token.kind else { throw fail(token, "expected ')' after now(: now() takes no arguments, found \(describe(token))") }
            try advance()
            return Operand(kind: .expression(.now), start: start, what: "now()")
        case .word(_, .subquery):
            return try parseSubquery()
        case .variable(let name) where subqueryVariables.contains(name):
            return try parseSubqueryVariable(name)
        case .word(_, .evaluatedObject) where !subqueryVariables.isEmpty:
            throw fail(token, "SELF inside a SUBQUERY: write $\(subqueryVariables.last!) for its member, and a bare key for the object outside it")
        default:
            let operand = try parseOperand()
            // Inside a SUBQUERY, a bare key is the object outside it (`$p.age > age`).
            guard case .key(let path) = operand.kind, !subqueryVariables.isEmpty else { return operand }
            guard subqueryVariables.count == 1 else {
                throw Failure(position: operand.start, reason: "the key '\(path)' inside a nested SUBQUERY reads the object two levels out; a SUBQUERY's condition may read its own variable's keys and those one level out ($\(subqueryVariables[subqueryVariables.count - 2]).key)")
            }
            return Operand(kind: .expression(.outer(path)), start: operand.start, what: "the key '\(path)' of the object outside the SUBQUERY")
        }
    }

    /// `$m` or `$m.key` inside `SUBQUERY(…, $m, …)`: the member, or a key of it; the variable of
    /// the SUBQUERY around it reads that one's member, as a key outside.
    mutating func parseSubqueryVariable(_ name: String) throws(Failure) -> Operand {
        let start = token
        try advance()
        let innermost = subqueryVariables.last == name
        guard case .symbol(.dot) = token.kind else {
            guard innermost else {
                throw fail(start, "$\(name) is the member of a SUBQUERY further out: compare its attributes ($\(name).key), not the object")
            }
            return Operand(kind: .evaluatedObject, start: start.start, what: "$\(name)")
        }
        try advance()
        let key = try parseKeyPath()
        guard case .key(let path) = key.kind else { return key }
        if innermost { return Operand(kind: .key(path), start: start.start, what: "the key '$\(name).\(path)'") }
        guard subqueryVariables.count >= 2, subqueryVariables[subqueryVariables.count - 2] == name else {
            throw fail(start, "$\(name).\(path) reads a SUBQUERY two levels out; a SUBQUERY's condition may read its own variable and the one just outside it")
        }
        return Operand(kind: .expression(.outer(path)), start: start.start, what: "the key '$\(name).\(path)' of the object outside the SUBQUERY")
    }

    /// `SUBQUERY(collection, $variable, predicate).@count`, or `.@sum.key`, `.@avg.key`, …
    mutating func parseSubquery() throws(Failure) -> Operand {
        let start = token
        nesting += 1
        guard nesting <= Self.maxDepth else { throw tooDeep(start) }
        try advance()
        guard case .symbol(.openParen) = token.kind else { throw fail(token, "expected '(' after SUBQUERY, found \(describe(token))") }
        try advance()
        let collection = try parseAtom()
        let relationship: String
        switch collection.kind {
        case .key(let path): relationship = path
        default:
            throw Failure(position: collection.start, reason: "SUBQUERY takes a to-many relationship of \(subqueryVariables.last.map { "$" + $0 } ?? "the object") first, found \(collection.what)")
        }
        guard case .symbol(.comma) = token.kind else { throw fail(token, "expected ',' after SUBQUERY's collection, found \(describe(token))") }
        try advance()
        guard case .variable(let variable) = token.kind else {
            throw fail(token, "expected SUBQUERY's variable ($m) after its collection, found \(describe(token))")
        }
        try advance()
        guard case .symbol(.comma) = token.kind else { throw fail(token, "expected ',' after SUBQUERY's variable, found \(describe(token))") }
        try advance()
        subqueryVariables.append(variable)
        let condition = try parseChain(or: true)
        subqueryVariables.removeLast()
        guard case .symbol(.closeParen) = token.kind else {
            throw fail(token, "expected AND, OR or ')' to close the SUBQUERY at offset \(start.start), found \(describe(token))")
        }
        try advance()
        nesting -= 1
        guard case .symbol(.dot) = token.kind else {
            throw fail(token, "expected .@count (or .@sum.key, .@avg.key, .@min.key, .@max.key) after SUBQUERY(…), found \(describe(token))")
        }
        try advance()
        guard case .atWord(let word) = token.kind, let function = CollectionFunction(rawValue: String(word.dropFirst())) else {
            throw fail(token, "expected @count, @sum, @avg, @min or @max after SUBQUERY(…)., found \(describe(token))")
        }
        try advance()
        var member: String?
        if function != .count {
            guard case .symbol(.dot) = token.kind else { throw fail(token, "expected '.' and a key after @\(function.rawValue), found \(describe(token))") }
            try advance()
            guard case .key(let path) = try parseKeyPath().kind else { preconditionFailure("unreachable: parseKeyPath returns a key") }
            member = path
        }
        let what = "SUBQUERY(\(relationship), $\(variable), …).@\(function.rawValue)\(member.map { "." + $0 } ?? "")"
        return Operand(kind: .expression(.subquery(relationship: relationship, condition: condition.node, function: function, member: member)),
                       start: start.start, what: what, depth: condition.depth + 1)
    }

    mutating func parseOperator() throws(Failure) -> OperatorWithOptions {
        var op: Condition.PredicateOperator
        if case .symbol(.comparison(let comparison)) = token.kind {
            op = .compare(comparison)
        } else if keyword(token) == .isIn {
            op = .isIn
        } else if keyword(token) == .between {
            op = .between
        } else if let textOperator = keyword(token)?.textOperator {
            op = .text(textOperator)
        } else {
            throw fail(token, "expected an operator (==, !=, <, <=, >, >=, IN, BETWEEN, LIKE, CONTAINS, BEGINSWITH, ENDSWITH or MATCHES)\(after), found \(describe(token))")
        }
        try advance()
        guard case .symbol(.openBracket) = token.kind else { return OperatorWithOptions(op: op, options: []) }
        try advance()
        var options: MatchOptions = []
        if case .word(let flags, _) = token.kind, flags.allSatisfy({ "cdCD".contains($0) }) {
            for flag in flags.lowercased() {
                options.insert(flag == "c" ? .caseInsensitive : .diacriticInsensitive)
            }
        } else {
            throw fail(token, "expected the options c, d or cd after '[', found \(describe(token))")
        }
        try advance()
        guard case .symbol(.closeBracket) = token.kind else {
            throw fail(token, "expected ']' after the options, found \(describe(token))")
        }
        try advance()
        return OperatorWithOptions(op: op, options: options)
    }

    /// Skips `SELF.` before a key path outside a SUBQUERY, where `SELF.name` is `name`; returns
    /// whether it did. (Inside one, SELF stays refused: a bare key there already reads the
    /// object outside.)
    mutating func skipSelfPrefix() throws(Failure) -> Bool {
        guard keyword(token) == .evaluatedObject, subqueryVariables.isEmpty, character(at: token.end) == "." else { return false }
        try advance()
        try advance()
        return true
    }

    func startsKeyPath(_ token: Token) -> Bool {
        switch token.kind {
        case .word: keyword(token) == nil
        case .escapedWord, .atWord, .placeholder(.key): true
        default: false
        }
    }

    mutating func parseOperand() throws(Failure) -> Operand {
        let start = token
        let before = previous
        func constant(_ value: Value, _ kind: AttributeKind?, _ what: String) -> Operand {
            Operand(kind: .constant(.value(value, kind)), start: start.start, what: what)
        }
        switch token.kind {
        case .word(let word, let keyword):
            guard let keyword else { return try parseKeyPath() }
            if try skipSelfPrefix() { return try parseKeyPath() }
            try advance()
            switch keyword {
            case .nilLiteral, .nullLiteral: return constant(.null, nil, word)
            case .evaluatedObject: return Operand(kind: .evaluatedObject, start: start.start, what: "SELF")
            case .trueLiteral, .yesLiteral: return constant(.integer(1), .bool, word)
            case .falseLiteral, .noLiteral: return constant(.integer(0), .bool, word)
            case .any, .some, .all, .none:
                throw fail(start, "a quantifier goes at the start of a comparison (ANY pets.name == 'Rex'); expected a key or a value\(after(previous: before)), found '\(word)'")
            default:
                throw fail(start, "expected a key or a value\(after(previous: before)), found the keyword '\(word)' (write #\(word) for a key of that name)")
            }
        case .escapedWord, .atWord, .placeholder(.key):
            return try parseKeyPath()
        case .integer(let magnitude):
            try advance()
            guard let value = Int64(exactly: magnitude) else {
                throw fail(start, "the integer is too large for a 64-bit signed integer")
            }
            return constant(.integer(value), .int, "the number \(value)")
        case .decimal(let value):
            try advance()
            return constant(.double(value), .double, "the number \(value)")
        case .string(let text):
            try advance()
            return constant(.text(text), .string, "the string \(snippet(start))")
        case .symbol(.minus):
            try advance()
            let number = token
            switch number.kind {
            case .integer(let magnitude):
                try advance()
                guard magnitude <= UInt64(Int64.max) + 1 else {
                    throw fail(start, "the integer is too small for a 64-bit signed integer")
                }
                let value = magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude)
                return constant(.integer(value), .int, "the number \(value)")
            case .decimal(let value):
                try advance()
                return constant(.double(-value), .double, "the number \(-value)")
            default:
                throw fail(number, "expected a number after '-', found \(describe(number))")
            }
        case .placeholder(let placeholder):
            let (argument, number) = try takeArgument(for: start)
            try advance()
            return try operand(for: argument, number: number, placeholder: placeholder, at: start)
        case .symbol(.openBrace):
            return try parseList()
        case .variable(let name):
            try advance()
            return Operand(kind: .variable(name), start: start.start, what: "the variable $\(name)")
        default:
            throw fail(start, "expected a key or a value\(after), found \(describe(start))")
        }
    }

    mutating func parseKeyPath() throws(Failure) -> Operand {
        let start = token
        var parts: [String] = []
        while true {
            switch token.kind {
            case .word(let name, _), .escapedWord(let name), .atWord(let name):
                parts.append(name)
            case .placeholder(.key):
                let (argument, number) = try takeArgument(for: token)
                switch argument {
                case let path as String: parts.append(path)
                case let key as Key:
                    // Its options would have to reach the operator, which the format names: a
                    // `Key` with options is refused rather than compared without them.
                    guard key.options.isEmpty else {
                        throw fail(token, "%K (argument \(number)) is the key '\(key.path)' with options: %K substitutes the key path only, so write the options on the operator instead (==[c], BEGINSWITH[cd])")
                    }
                    parts.append(key.path)
                default:
                    throw fail(token, "%K (argument \(number)) needs a key path as a String, found \(Self.describeArgument(argument))")
                }
            default:
                throw fail(token, "expected a key name after '.', found \(describe(token))")
            }
            try advance()
            guard case .symbol(.dot) = token.kind else { break }
            try advance()
        }
        let path = parts.joined(separator: ".")
        return Operand(kind: .key(path), start: start.start, what: "the key '\(path)'")
    }

    /// `{a, b, …}`: values and variables only (no keys, no nested lists). Variables are given
    /// their values by `substituting(_:)`, as in `age BETWEEN {$LOW, $HIGH}`.
    mutating func parseList() throws(Failure) -> Operand {
        let open = token
        try advance()
        var items: [Condition.Operand] = []
        // Every item, once a variable is among them.
        var withVariables: [Condition.Expression]?
        if case .symbol(.closeBrace) = token.kind {
            try advance()
            return Operand(kind: .list(items), start: open.start, what: "an empty list")
        }
        while true {
            if case .symbol(.openBrace) = token.kind {
                throw fail(token, "lists cannot be nested: expected a value, found '{'")
            }
            let element = try parseOperand()
            switch element.kind {
            case .constant(let value):
                items.append(value)
                withVariables?.append(.constant(value))
            case .variable(let name) where subqueryVariables.contains(name):
                throw Failure(position: element.start, reason: "$\(name) is the SUBQUERY's member, not a value: a list holds values and variables given values with substituting(_:)")
            case .variable(let name):
                if withVariables == nil { withVariables = items.map { .constant($0) } }
                withVariables!.append(.variable(name))
            case .key, .evaluatedObject, .expression: throw Failure(position: element.start, reason: "expected a value in the list, found \(element.what)")
            case .list, .listWithVariables: throw Failure(position: element.start, reason: "lists cannot be nested: expected a value, found \(element.what)")
            }
            switch token.kind {
            case .symbol(.comma):
                try advance()
            case .symbol(.closeBrace):
                try advance()
                if let withVariables {
                    return Operand(kind: .listWithVariables(withVariables), start: open.start, what: "a list of \(withVariables.count) item\(withVariables.count == 1 ? "" : "s")")
                }
                return Operand(kind: .list(items), start: open.start, what: "a list of \(items.count) value\(items.count == 1 ? "" : "s")")
            default:
                throw fail(token, "expected ',' or '}' in the list that starts at offset \(open.start), found \(describe(token))")
            }
        }
    }

    /// The node for `left op right`: the node the operators on `Key` build when there is one
    /// (a key against a value, no options), an `expression` node otherwise, which resolution
    /// checks against the model.
    func build(_ left: Operand, _ written: OperatorWithOptions, _ spelled: String, _ right: Operand, quantified: Bool) throws(Failure) -> Condition.Node {
        let options = written.options
        let general = Condition.Node.expression(left.expression, written.op, right.expression, options)
        switch written.op {
        case .compare(let comparison):
            switch (left.kind, right.kind) {
            case (.list, _), (.listWithVariables, _):
                throw Failure(position: left.start, reason: "found \(left.what) before \(spelled): lists go only after IN or BETWEEN")
            case (_, .list), (_, .listWithVariables):
                throw Failure(position: right.start, reason: "found \(right.what) after \(spelled): lists go only after IN or BETWEEN")
            case (.key(let path), .key(let other)):
                guard !quantified else {
                    throw Failure(position: right.start, reason: "a quantified comparison compares members with a value, not with \(right.what)")
                }
                return options.isEmpty ? .compare(path, comparison, .key(other)) : general
            case (.key(let path), .constant(let value)):
                try checkObject(value, comparison, spelled, right)
                return options.isEmpty ? .compare(path, comparison, value) : general
            case (.constant(let value), .key(let path)):
                try checkObject(value, comparison, spelled, left)
                return options.isEmpty ? .compare(path, comparison.flipped, value)
                    : .expression(.key(path), .compare(comparison.flipped), .constant(value), options)
            default:
                return general
            }
        case .isIn, .between:
            if left.kind.isList {
                throw Failure(position: left.start, reason: "found \(left.what) before \(spelled): lists go only after IN or BETWEEN")
            }
            let count: Int? = switch right.kind {
            case .list(let items): items.count
            case .listWithVariables(let items): items.count
            default: nil
            }
            if written.op.isBetween, let count, count != 2 {
                throw Failure(position: right.start, reason: "BETWEEN needs exactly two values, {low, high}, found \(count)")
            }
            guard case .list(let items) = right.kind else {
                // After IN, a string asks for a substring (`name IN 'Wilhelmina'`) and a key
                // may be a to-many relationship (`%@ IN pets`); no other value can follow.
                if case .constant(let value) = right.kind, written.op.isBetween || !value.isText {
                    let form = written.op.isBetween ? "{low, high}" : "{a, b, …}"
                    throw Failure(position: right.start, reason: "expected a list after \(spelled), \(form) or %@ with an array, found \(right.what)")
                }
                return general
            }
            guard options.isEmpty, case .key(let path) = left.kind else { return general }
            return written.op.isBetween ? .between(path, items[0], items[1]) : .oneOf(path, items)
        case .text(let textOperator):
            if left.kind.isList {
                throw Failure(position: left.start, reason: "found \(left.what) before \(spelled): lists go only after IN or BETWEEN")
            }
            if right.kind.isList {
                throw Failure(position: right.start, reason: "found \(right.what) after \(spelled): lists go only after IN or BETWEEN")
            }
            if case .key(let path) = left.kind, case .constant(.value(.text(let pattern), let kind)) = right.kind, kind == .string || kind == .url {
                return .text(path, textOperator, pattern, options)
            }
            // A string operator takes a string, or a key; CONTAINS also an object, for a to-many
            // relationship (`pets CONTAINS %@`).
            if case .constant(let value) = right.kind, !value.isText, !(textOperator == .contains && value.isObject) {
                throw Failure(position: right.start, reason: "expected a string after \(spelled), found \(right.what)")
            }
            return general
        }
    }

    func checkObject(_ value: Condition.Operand, _ comparison: ComparisonOperator, _ spelled: String, _ operand: Operand) throws(Failure) {
        if case .object = value, comparison.isOrdering {
            throw Failure(position: operand.start, reason: "\(operand.what) is an object: objects compare only with == and !=, not \(spelled)")
        }
    }

    // MARK: - Arguments

    mutating func takeArgument(for placeholder: Token) throws(Failure) -> (Any?, Int) {
        guard argumentsUsed < arguments.count else {
            throw fail(placeholder, "too few arguments: \(spelling(placeholder)) is placeholder \(argumentsUsed + 1), but \(arguments.count) \(arguments.count == 1 ? "was" : "were") given")
        }
        argumentsUsed += 1
        return (arguments[argumentsUsed - 1].map { $0 as Any }, argumentsUsed)
    }

    func operand(for argument: Any?, number: Int, placeholder: Placeholder, at token: Token) throws(Failure) -> Operand {
        let spelled = spelling(token)
        let what = "the argument for \(spelled) (argument \(number), \(Self.describeArgument(argument)))"
        func constant(_ value: Condition.Operand) -> Operand { Operand(kind: .constant(value), start: token.start, what: what) }
        switch placeholder {
        case .integer:
            if let integer = argument as? any BinaryInteger, let value = Int64(exactly: integer) {
                return constant(.value(.integer(value), .int))
            }
            throw fail(token, "\(spelled) (argument \(number)) needs an integer that fits in 64 bits, found \(Self.describeArgument(argument))")
        case .double:
            // Through Double's stored form, so a NaN is NULL here as everywhere else.
            if let number = argument as? any BinaryFloatingPoint { return constant(.value(Double(number).storedValue, .double)) }
            if let integer = argument as? any BinaryInteger { return constant(.value(Double(integer).storedValue, .double)) }
            throw fail(token, "\(spelled) (argument \(number)) needs a floating-point number, found \(Self.describeArgument(argument))")
        case .key:
            // A %K that starts no key path: parseOperand sends %K to parseKeyPath.
            throw fail(token, "expected a key path")
        case .value:
            if let list = argument as? any FormatList {
                var items: [Condition.Operand] = []
                for (index, element) in list.formatElements.enumerated() {
                    guard let item = Self.operand(for: element) else {
                        throw fail(token, "element \(index + 1) of the array for \(spelled) (argument \(number)) is \(Self.describeArgument(element)), \(Self.supported)")
                    }
                    items.append(item)
                }
                return Operand(kind: .list(items), start: token.start, what: "the array for \(spelled) (argument \(number))")
            }
            if argument is Key {
                throw fail(token, "\(spelled) (argument \(number)) is a Key: pass keys with %K")
            }
            guard let value = Self.operand(for: argument) else {
                throw fail(token, "the argument for \(spelled) (argument \(number)) is \(Self.describeArgument(argument)), \(Self.supported)")
            }
            return constant(value)
        }
    }

    static let supported = "which a predicate cannot use: pass a String, a number, a Bool, a Date, Data, a UUID, a URL, a Decimal, an enum with such raw values, a managed object, an ObjectID, nil, or (for IN and BETWEEN) an array of these"

    /// A value for a `%@` or a variable: one constant, or a list of them from an array.
    enum Constant {
        case value(Condition.Operand)
        case list([Condition.Operand])
    }

    /// An argument or a variable's value as a constant; `nil` for an unsupported type (a `Key`
    /// included: keys go through `%K`).
    static func constant(for argument: Any?) -> Constant? {
        if let list = argument as? any FormatList {
            var items: [Condition.Operand] = []
            for element in list.formatElements {
                guard let item = operand(for: element) else { return nil }
                items.append(item)
            }
            return .list(items)
        }
        if argument is Key { return nil }
        return operand(for: argument).map(Constant.value)
    }

    /// An argument as a constant, as the operators on `Key` make it; `nil` for an unsupported type.
    static func operand(for argument: Any?) -> Condition.Operand? {
        guard let argument else { return .value(.null, nil) }
        if let object = argument as? ManagedObject { return .object(object.objectID) }
        if let id = argument as? ObjectID { return .object(id) }
        if let value = argument as? any AttributeValue { return .value(value.storedValue, type(of: value).attributeKind) }
        if let text = argument as? Substring { return .value(.text(String(text)), .string) }
        if let raw = argument as? any RawRepresentable, let value = raw.rawValue as? any AttributeValue {
            return .value(value.storedValue, type(of: value).attributeKind)
        }
        if let optional = argument as? any FormatOptional { return operand(for: optional.formatWrapped) }
        return nil
    }

    static func describeArgument(_ argument: Any?) -> String {
        guard let argument else { return "nil" }
        if let optional = argument as? any FormatOptional, optional.formatWrapped == nil { return "nil" }
        let name = String(describing: type(of: argument))
        let article = name.first.map { "AEIO".contains($0) } == true ? "an" : "a"
        return "\(article) \(name)"
    }

    // MARK: - Messages

    func fail(_ token: Token, _ reason: String) -> Failure {
        Failure(position: token.start, reason: reason)
    }

    func tooDeep(_ token: Token) -> Failure {
        fail(token, "the predicate nests deeper than \(Self.maxDepth) levels")
    }

    /// " after 'x'" for the token before the current one; empty at the start.
    var after: String { after(previous: previous) }

    func after(previous: Token?) -> String {
        previous.map { " after \(describe($0))" } ?? ""
    }

    /// The token as written, shortened, on one line (control characters escaped).
    func snippet(_ token: Token) -> String {
        let end = min(token.end, characters.count)
        let start = min(token.start, end)
        let text = characters[start..<end]
        let shown = text.count <= 24 ? text : text.prefix(23)
        return shown.map(Self.visible).joined() + (shown.count < text.count ? "…" : "")
    }

    /// A character as it may appear inside a one-line message.
    static func visible(_ character: Character) -> String {
        switch character {
        case "\n": return "\\n"
        case "\t": return "\\t"
        case "\r": return "\\r"
        case "\r\n": return "\\r\\n"
        default:
            guard character.isNewline || isControl(character) else { return String(character) }
            return character.unicodeScalars.map { "\\u{\(String($0.value, radix: 16))}" }.joined()
        }
    }

    static func isControl(_ character: Character) -> Bool {
        if let ascii = character.asciiValue { return ascii < 0x20 || ascii == 0x7F }
        return character.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    func spelling(_ token: Token) -> String { snippet(token) }

    func describe(_ token: Token) -> String {
        switch token.kind {
        case .end: "the end of the string"
        case .string: "the string \(snippet(token))"
        case .integer, .decimal: "the number \(snippet(token))"
        default: "'\(snippet(token))'"
        }
    }

    /// The message: the reason, then the string with a caret under the offending character.
    /// Long strings show a window around it; control characters show as spaces, so the caret
    /// lines up.
    static func message(for failure: Failure, in characters: [Character]) -> String {
        let width = 100
        var low = 0
        var high = characters.count
        if characters.count > width {
            low = max(0, min(failure.position - width / 2, characters.count - width))
            high = min(characters.count, low + width)
        }
        var line = low > 0 ? "…" : ""
        for character in characters[low..<high] {
            line.append(isSpace(character) || isControl(character) ? " " : character)
        }
        if high < characters.count { line += "…" }
        let caret = failure.position - low + (low > 0 ? 1 : 0)
        return "Invalid format string at offset \(failure.position): \(failure.reason).\n"
            + "    \(line)\n"
            + "    \(String(repeating: " ", count: max(0, caret)))^"
    }
}

extension Condition.Operand {
    /// Whether the operand is a string (or a URL's text).
    var isText: Bool {
        if case .value(.text, let kind) = self { kind == .string || kind == .url } else { false }
    }

    var isObject: Bool { if case .object = self { true } else { false } }
}

extension ComparisonOperator {
    /// The operator with its sides swapped: `18 < age` is `age > 18`.
    var flipped: ComparisonOperator {
        switch self {
        case .less: .greater
        case .lessOrEqual: .greaterOrEqual
        case .greater: .less
        case .greaterOrEqual: .lessOrEqual
        case .equal, .notEqual: self
        }
    }
}

/// An optional inside an `Any`, so a `nil` of any type reads as `nil`.
fileprivate protocol FormatOptional {
    var formatWrapped: Any? { get }
}

extension Optional: FormatOptional {
    var formatWrapped: Any? { map { $0 as Any } }
}

/// The collections a `%@` may pass to IN and BETWEEN.
fileprivate protocol FormatList {
    var formatElements: [Any] { get }
}

extension Array: FormatList {
    var formatElements: [Any] { map { $0 as Any } }
}

extension ArraySlice: FormatList {
    var formatElements: [Any] { map { $0 as Any } }
}

extension ContiguousArray: FormatList {
    var formatElements: [Any] { map { $0 as Any } }
}

extension Set: FormatList {
    var formatElements: [Any] { map { $0 as Any } }
}
