import Foundation

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
/// comparison := [ANY | SOME | ALL | NONE] operand operator operand
/// operator   := = == != <> < > <= >= =< => | IN | BETWEEN
///             | (LIKE | CONTAINS | BEGINSWITH | ENDSWITH | MATCHES) ['[' c | d | cd ']']
/// operand    := keyPath | value | '{' [value (',' value)*] '}'
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

    private let characters: [Character]
    private let arguments: [(any Sendable)?]
    /// The lexer's position in `characters`.
    private var offset = 0
    /// The token being looked at, and the one before it (for messages).
    private var token = Token(kind: .end, start: 0, end: 0)
    private var previous: Token?
    /// How many arguments the placeholders so far have taken.
    private var argumentsUsed = 0
    /// Open parentheses around the current position.
    private var nesting = 0

    private init(characters: [Character], arguments: [(any Sendable)?]) {
        self.characters = characters
        self.arguments = arguments
    }

    // MARK: - Tokens

    private enum Symbol: Equatable {
        case openParen, closeParen, openBrace, closeBrace, openBracket, closeBracket, comma, dot, minus
        case comparison(ComparisonOperator)
        case and, or, not
    }

    private enum Placeholder {
        /// `%@`: any value, or an array for IN and BETWEEN.
        case value
        /// `%K`: a key path.
        case key
        /// `%d %i %ld %li %lld %lli`.
        case integer
        /// `%f %lf`.
        case double
    }

    private enum TokenKind {
        /// A name, and the keyword it spells if it does.
        case word(String, Keyword?)
        /// `#name`: a name, even when it is spelled like a keyword.
        case escapedWord(String)
        /// `@count`, with its `@`.
        case atWord(String)
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

    private struct Token {
        var kind: TokenKind
        /// The offsets of the token's first character and one past its last.
        var start: Int
        var end: Int
    }

    private enum Keyword: String {
        case and = "AND", or = "OR", not = "NOT"
        case any = "ANY", all = "ALL", some = "SOME", none = "NONE"
        case isIn = "IN", between = "BETWEEN"
        case like = "LIKE", contains = "CONTAINS", beginsWith = "BEGINSWITH", endsWith = "ENDSWITH", matches = "MATCHES"
        case truePredicate = "TRUEPREDICATE", falsePredicate = "FALSEPREDICATE"
        case nilLiteral = "NIL", nullLiteral = "NULL", trueLiteral = "TRUE", falseLiteral = "FALSE"
        case yesLiteral = "YES", noLiteral = "NO"

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

    private func keyword(_ token: Token) -> Keyword? {
        if case .word(_, let keyword) = token.kind { keyword } else { nil }
    }

    // MARK: - Lexer

    private func character(at index: Int) -> Character? {
        index < characters.count ? characters[index] : nil
    }

    private static func isDigit(_ character: Character?, radix: Int = 10) -> Bool {
        digitValue(character, radix: radix) != nil
    }

    private static func digitValue(_ character: Character?, radix: Int) -> UInt64? {
        guard let ascii = character?.asciiValue else { return nil }
        let value: UInt8
        switch ascii {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): value = ascii - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): value = ascii - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): value = ascii - UInt8(ascii: "A") + 10
        default: return nil
        }
        return Int(value) < radix ? UInt64(value) : nil
    }

    /// Whitespace, with a fast path for ASCII.
    private static func isSpace(_ character: Character) -> Bool {
        if let ascii = character.asciiValue { return ascii == 0x20 || (0x09...0x0D).contains(ascii) }
        return character.isWhitespace
    }

    private static func startsName(_ character: Character?) -> Bool {
        guard let character else { return false }
        return character == "_" || character.isLetter
    }

    private static func continuesName(_ character: Character?) -> Bool {
        guard let character else { return false }
        return character == "_" || character.isLetter || character.isNumber
    }

    private mutating func advance() throws(Failure) {
        previous = token
        token = try lex()
    }

    private mutating func lex() throws(Failure) -> Token {
        while let character = character(at: offset), Self.isSpace(character) { offset += 1 }
        let start = offset
        guard let character = character(at: offset) else { return Token(kind: .end, start: start, end: start) }
        let kind: TokenKind
        if Self.isDigit(character) {
            kind = try lexNumber()
        } else if character == "'" || character == "\"" {
            kind = .string(try lexString())
        } else if Self.startsName(character) {
            let name = lexName()
            kind = .word(name, Keyword(name))
        } else {
            offset += 1
            switch character {
            case "#":
                guard Self.startsName(self.character(at: offset)) else {
                    throw Failure(position: start, reason: "expected a key name after '#' (#name is a key even when spelled like a keyword)")
                }
                kind = .escapedWord(lexName())
            case "@":
                guard Self.startsName(self.character(at: offset)) else {
                    throw Failure(position: start, reason: "expected a name after '@', such as @count")
                }
                kind = .atWord("@" + lexName())
            case "%": kind = .placeholder(try lexPlaceholder(start: start))
            case "$":
                throw Failure(position: start, reason: "variables such as $name are not supported; pass values as %@ arguments")
            case "(": kind = .symbol(.openParen)
            case ")": kind = .symbol(.closeParen)
            case "{": kind = .symbol(.openBrace)
            case "}": kind = .symbol(.closeBrace)
            case "[": kind = .symbol(.openBracket)
            case "]": kind = .symbol(.closeBracket)
            case ",": kind = .symbol(.comma)
            case ".": kind = .symbol(.dot)
            case "-": kind = .symbol(.minus)
            case "=":
                switch self.character(at: offset) {
                case "=": offset += 1; kind = .symbol(.comparison(.equal))
                case "<": offset += 1; kind = .symbol(.comparison(.lessOrEqual))
                case ">": offset += 1; kind = .symbol(.comparison(.greaterOrEqual))
                default: kind = .symbol(.comparison(.equal))
                }
            case "!":
                if self.character(at: offset) == "=" { offset += 1; kind = .symbol(.comparison(.notEqual)) } else { kind = .symbol(.not) }
            case "<":
                switch self.character(at: offset) {
                case "=": offset += 1; kind = .symbol(.comparison(.lessOrEqual))
                case ">": offset += 1; kind = .symbol(.comparison(.notEqual))
                default: kind = .symbol(.comparison(.less))
                }
            case ">":
                if self.character(at: offset) == "=" { offset += 1; kind = .symbol(.comparison(.greaterOrEqual)) } else { kind = .symbol(.comparison(.greater)) }
            case "&":
                if self.character(at: offset) == "&" { offset += 1; kind = .symbol(.and) } else { kind = .unknown }
            case "|":
                if self.character(at: offset) == "|" { offset += 1; kind = .symbol(.or) } else { kind = .unknown }
            default: kind = .unknown
            }
        }
        return Token(kind: kind, start: start, end: offset)
    }

    private mutating func lexName() -> String {
        let start = offset
        while Self.continuesName(character(at: offset)) { offset += 1 }
        return String(characters[start..<offset])
    }

    /// `%@ %K %d %i %ld %li %lld %lli %f %lf`, after the `%`.
    private mutating func lexPlaceholder(start: Int) throws(Failure) -> Placeholder {
        var longs = 0
        while character(at: offset) == "l" && longs < 2 { offset += 1; longs += 1 }
        let character = character(at: offset)
        offset += 1
        switch character {
        case "@" where longs == 0: return .value
        case "K" where longs == 0: return .key
        case "d", "i": return .integer
        case "f" where longs <= 1: return .double
        default:
            throw Failure(position: start, reason: "unknown placeholder: expected %@, %K, %d, %i, %ld, %lld, %f or %lf")
        }
    }

    /// A decimal, hexadecimal (`0x`), octal (`0o`) or binary (`0b`) integer, or a decimal
    /// number with a fraction and/or an exponent.
    private mutating func lexNumber() throws(Failure) -> TokenKind {
        let start = offset
        let radix: Int? = switch (character(at: offset), character(at: offset + 1)) {
        case ("0", "x"), ("0", "X"): 16
        case ("0", "o"), ("0", "O"): 8
        case ("0", "b"), ("0", "B"): 2
        default: nil
        }
        if let radix {
            offset += 2
            guard Self.isDigit(character(at: offset), radix: radix) else {
                throw Failure(position: start, reason: "expected digits after '\(String(characters[start..<offset]))'")
            }
            return .integer(try accumulate(radix: radix, start: start))
        }
        while Self.isDigit(character(at: offset)) { offset += 1 }
        var isDecimal = false
        if character(at: offset) == ".", Self.isDigit(character(at: offset + 1)) {
            isDecimal = true
            offset += 1
            while Self.isDigit(character(at: offset)) { offset += 1 }
        }
        if character(at: offset) == "e" || character(at: offset) == "E" {
            let sign = character(at: offset + 1) == "+" || character(at: offset + 1) == "-" ? 1 : 0
            if Self.isDigit(character(at: offset + 1 + sign)) {
                isDecimal = true
                offset += 1 + sign
                while Self.isDigit(character(at: offset)) { offset += 1 }
            }
        }
        if isDecimal {
            guard let value = Double(String(characters[start..<offset])), value.isFinite else {
                throw Failure(position: start, reason: "the number is out of range for a Double")
            }
            return .decimal(value)
        }
        let end = offset
        offset = start
        let value = try accumulate(radix: 10, start: start)
        offset = end
        return .integer(value)
    }

    /// The digits at `offset` in `radix`, as a 64-bit magnitude.
    private mutating func accumulate(radix: Int, start: Int) throws(Failure) -> UInt64 {
        var value: UInt64 = 0
        while let digit = Self.digitValue(character(at: offset), radix: radix) {
            let (shifted, overflow) = value.multipliedReportingOverflow(by: UInt64(radix))
            let (sum, carry) = shifted.addingReportingOverflow(digit)
            guard !overflow, !carry else {
                throw Failure(position: start, reason: "the integer is too large for 64 bits")
            }
            value = sum
            offset += 1
        }
        return value
    }

    /// A string in single or double quotes, with the escapes `\n \t \r \0 \\ \' \" \uXXXX`.
    private mutating func lexString() throws(Failure) -> String {
        let start = offset
        let quote = characters[offset]
        offset += 1
        var text = ""
        while let character = character(at: offset) {
            if character == quote {
                offset += 1
                return text
            }
            guard character == "\\" else {
                text.append(character)
                offset += 1
                continue
            }
            let escape = offset
            offset += 1
            switch self.character(at: offset) {
            case "n": text.append("\n")
            case "t": text.append("\t")
            case "r": text.append("\r")
            case "0": text.append("\0")
            case "\\": text.append("\\")
            case "'": text.append("'")
            case "\"": text.append("\"")
            case "u":
                var code = try lexUnicodeEscape(at: escape)
                if (0xD800...0xDBFF).contains(code) {
                    guard self.character(at: offset + 1) == "\\", self.character(at: offset + 2) == "u" else {
                        throw Failure(position: escape, reason: "a high surrogate \\u escape must be followed by a low surrogate \\uDC00–\\uDFFF")
                    }
                    offset += 2
                    let low = try lexUnicodeEscape(at: offset - 1)
                    guard (0xDC00...0xDFFF).contains(low) else {
                        throw Failure(position: offset - 5, reason: "expected a low surrogate \\uDC00–\\uDFFF after a high surrogate")
                    }
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let scalar = Unicode.Scalar(code) else {
                    throw Failure(position: escape, reason: "\\u escape is not a Unicode scalar (a lone surrogate)")
                }
                text.unicodeScalars.append(scalar)
            case nil:
                break
            default:
                throw Failure(position: escape, reason: "unknown escape: expected \\n, \\t, \\r, \\0, \\\\, \\', \\\" or \\uXXXX")
            }
            offset += 1
        }
        throw Failure(position: start, reason: "unterminated string: expected a closing \(quote) before the end of the string")
    }

    /// The four hex digits after the `u` at `offset` (the `\` is at `escape`); leaves `offset`
    /// on the last digit.
    private mutating func lexUnicodeEscape(at escape: Int) throws(Failure) -> UInt32 {
        var code: UInt32 = 0
        for index in 1...4 {
            guard let digit = Self.digitValue(character(at: offset + index), radix: 16) else {
                throw Failure(position: escape, reason: "expected four hexadecimal digits after \\u")
            }
            code = code << 4 | UInt32(digit)
        }
        offset += 4
        return code
    }

    // MARK: - Parser

    /// A parsed predicate and the depth of its node.
    private struct Parsed {
        var node: Condition.Node
        var depth: Int
    }

    private enum Operator {
        case compare(ComparisonOperator)
        case isIn
        case between
        case text(TextOperator, MatchOptions)

        var isBetween: Bool { if case .between = self { true } else { false } }
    }

    /// One side of a comparison.
    private struct Operand {
        enum Kind {
            case key(String)
            case constant(Condition.Operand)
            case list([Condition.Operand])
        }
        var kind: Kind
        var start: Int
        /// What it is, for messages: "the key 'age'", "the string 'x'", "the argument for %@ (an Int)".
        var what: String
    }

    private mutating func parsePredicate() throws(Failure) -> Condition.Node {
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
        guard argumentsUsed == arguments.count else {
            let given = "\(arguments.count) \(arguments.count == 1 ? "was" : "were") given"
            throw Failure(position: characters.count, reason: "too many arguments: the format string uses \(argumentsUsed), but \(given)")
        }
        return result.node
    }

    private func isJoiner(or: Bool) -> Bool {
        switch token.kind {
        case .symbol(.or): or
        case .symbol(.and): !or
        default: keyword(token) == (or ? .or : .and)
        }
    }

    /// `a OR b OR …` (or `a AND b AND …`), left-associative like `||` and `&&`.
    private mutating func parseChain(or: Bool) throws(Failure) -> Parsed {
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
    private func join(_ terms: [Parsed], or: Bool, at joiner: Token) throws(Failure) -> Parsed {
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

    private mutating func parseNot() throws(Failure) -> Parsed {
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

    private mutating func parsePrimary() throws(Failure) -> Parsed {
        if case .symbol(.openParen) = token.kind {
            let open = token
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

    private mutating func parseComparison() throws(Failure) -> Parsed {
        var quantifier: Quantifier?
        if let found = keyword(token)?.quantifier {
            let spelled = spelling(token)
            quantifier = found
            try advance()
            guard startsKeyPath(token) else {
                throw fail(token, "expected a key path through a to-many relationship after \(spelled) (as in ANY pets.name == 'Rex'), found \(describe(token))")
            }
        }
        let left = try parseOperand()
        let operatorToken = token
        let op = try parseOperator()
        let right = try parseOperand()
        let node = try build(left, op, spelling(operatorToken), right, quantified: quantifier != nil)
        guard let quantifier, case .key(let path) = left.kind else {
            return Parsed(node: node, depth: 1)
        }
        return Parsed(node: .quantified(quantifier, path, node), depth: 2)
    }

    private mutating func parseOperator() throws(Failure) -> Operator {
        let found = token
        let op: Operator
        if case .symbol(.comparison(let comparison)) = token.kind {
            op = .compare(comparison)
        } else if keyword(token) == .isIn {
            op = .isIn
        } else if keyword(token) == .between {
            op = .between
        } else if let textOperator = keyword(token)?.textOperator {
            op = .text(textOperator, [])
        } else {
            throw fail(token, "expected an operator (==, !=, <, <=, >, >=, IN, BETWEEN, LIKE, CONTAINS, BEGINSWITH, ENDSWITH or MATCHES)\(after), found \(describe(token))")
        }
        try advance()
        guard case .symbol(.openBracket) = token.kind else { return op }
        guard case .text(let textOperator, _) = op else {
            throw fail(token, "options such as [c] apply only to LIKE, CONTAINS, BEGINSWITH, ENDSWITH and MATCHES, not to \(spelling(found))")
        }
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
        return .text(textOperator, options)
    }

    private func startsKeyPath(_ token: Token) -> Bool {
        switch token.kind {
        case .word: keyword(token) == nil
        case .escapedWord, .atWord, .placeholder(.key): true
        default: false
        }
    }

    private mutating func parseOperand() throws(Failure) -> Operand {
        let start = token
        let before = previous
        func constant(_ value: Value, _ kind: AttributeKind?, _ what: String) -> Operand {
            Operand(kind: .constant(.value(value, kind)), start: start.start, what: what)
        }
        switch token.kind {
        case .word(let word, let keyword):
            guard let keyword else { return try parseKeyPath() }
            try advance()
            switch keyword {
            case .nilLiteral, .nullLiteral: return constant(.null, nil, word)
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
        default:
            throw fail(start, "expected a key or a value\(after), found \(describe(start))")
        }
    }

    private mutating func parseKeyPath() throws(Failure) -> Operand {
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
                case let key as Key: parts.append(key.path)
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

    /// `{a, b, …}`: values only (no keys, no nested lists).
    private mutating func parseList() throws(Failure) -> Operand {
        let open = token
        try advance()
        var items: [Condition.Operand] = []
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
            case .constant(let value): items.append(value)
            case .key: throw Failure(position: element.start, reason: "expected a value in the list, found \(element.what)")
            case .list: throw Failure(position: element.start, reason: "lists cannot be nested: expected a value, found \(element.what)")
            }
            switch token.kind {
            case .symbol(.comma):
                try advance()
            case .symbol(.closeBrace):
                try advance()
                return Operand(kind: .list(items), start: open.start, what: "a list of \(items.count) value\(items.count == 1 ? "" : "s")")
            default:
                throw fail(token, "expected ',' or '}' in the list that starts at offset \(open.start), found \(describe(token))")
            }
        }
    }

    /// The node for `left op right`, built as the operators on `Key` build it.
    private func build(_ left: Operand, _ op: Operator, _ spelled: String, _ right: Operand, quantified: Bool) throws(Failure) -> Condition.Node {
        func keyOnLeft() throws(Failure) -> String {
            guard case .key(let path) = left.kind else {
                throw Failure(position: left.start, reason: "expected a key before \(spelled), found \(left.what)")
            }
            return path
        }
        switch op {
        case .compare(let comparison):
            switch (left.kind, right.kind) {
            case (.list, _):
                throw Failure(position: left.start, reason: "found \(left.what) before \(spelled): lists go only after IN or BETWEEN")
            case (_, .list):
                throw Failure(position: right.start, reason: "found \(right.what) after \(spelled): lists go only after IN or BETWEEN")
            case (.key(let path), .key(let other)):
                guard !quantified else {
                    throw Failure(position: right.start, reason: "a quantified comparison compares members with a value, not with \(right.what)")
                }
                return .compare(path, comparison, .key(other))
            case (.key(let path), .constant(let value)):
                try checkObject(value, comparison, spelled, right)
                return .compare(path, comparison, value)
            case (.constant(let value), .key(let path)):
                try checkObject(value, comparison, spelled, left)
                return .compare(path, comparison.flipped, value)
            case (.constant, .constant):
                throw Failure(position: left.start, reason: "a comparison needs a key on one side, found \(left.what) and \(right.what)")
            }
        case .isIn, .between:
            let path = try keyOnLeft()
            guard case .list(let items) = right.kind else {
                let form = op.isBetween ? "{low, high}" : "{a, b, …}"
                throw Failure(position: right.start, reason: "expected a list after \(spelled), \(form) or %@ with an array, found \(right.what)")
            }
            guard op.isBetween else { return .oneOf(path, items) }
            guard items.count == 2 else {
                throw Failure(position: right.start, reason: "BETWEEN needs exactly two values, {low, high}, found \(items.count)")
            }
            return .between(path, items[0], items[1])
        case .text(let textOperator, let options):
            let path = try keyOnLeft()
            guard case .constant(.value(.text(let pattern), let kind)) = right.kind, kind == .string || kind == .url else {
                throw Failure(position: right.start, reason: "expected a string after \(spelled), found \(right.what)")
            }
            return .text(path, textOperator, pattern, options)
        }
    }

    private func checkObject(_ value: Condition.Operand, _ comparison: ComparisonOperator, _ spelled: String, _ operand: Operand) throws(Failure) {
        if case .object = value, comparison.isOrdering {
            throw Failure(position: operand.start, reason: "\(operand.what) is an object: objects compare only with == and !=, not \(spelled)")
        }
    }

    // MARK: - Arguments

    private mutating func takeArgument(for placeholder: Token) throws(Failure) -> (Any?, Int) {
        guard argumentsUsed < arguments.count else {
            throw fail(placeholder, "too few arguments: \(spelling(placeholder)) is placeholder \(argumentsUsed + 1), but \(arguments.count) \(arguments.count == 1 ? "was" : "were") given")
        }
        argumentsUsed += 1
        return (arguments[argumentsUsed - 1].map { $0 as Any }, argumentsUsed)
    }

    private func operand(for argument: Any?, number: Int, placeholder: Placeholder, at token: Token) throws(Failure) -> Operand {
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
            if let number = argument as? any BinaryFloatingPoint { return constant(.value(.double(Double(number)), .double)) }
            if let integer = argument as? any BinaryInteger { return constant(.value(.double(Double(integer)), .double)) }
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

    private static let supported = "which a predicate cannot use: pass a String, a number, a Bool, a Date, Data, a UUID, a URL, a Decimal, an enum with such raw values, a managed object, an ObjectID, nil, or (for IN and BETWEEN) an array of these"

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

    private static func describeArgument(_ argument: Any?) -> String {
        guard let argument else { return "nil" }
        if let optional = argument as? any FormatOptional, optional.formatWrapped == nil { return "nil" }
        let name = String(describing: type(of: argument))
        let article = name.first.map { "AEIO".contains($0) } == true ? "an" : "a"
        return "\(article) \(name)"
    }

    // MARK: - Messages

    private func fail(_ token: Token, _ reason: String) -> Failure {
        Failure(position: token.start, reason: reason)
    }

    private func tooDeep(_ token: Token) -> Failure {
        fail(token, "the predicate nests deeper than \(Self.maxDepth) levels")
    }

    /// " after 'x'" for the token before the current one; empty at the start.
    private var after: String { after(previous: previous) }

    private func after(previous: Token?) -> String {
        previous.map { " after \(describe($0))" } ?? ""
    }

    /// The token as written, shortened, on one line (control characters escaped).
    private func snippet(_ token: Token) -> String {
        let end = min(token.end, characters.count)
        let start = min(token.start, end)
        let text = characters[start..<end]
        let shown = text.count <= 24 ? text : text.prefix(23)
        return shown.map(Self.visible).joined() + (shown.count < text.count ? "…" : "")
    }

    /// A character as it may appear inside a one-line message.
    private static func visible(_ character: Character) -> String {
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

    private static func isControl(_ character: Character) -> Bool {
        if let ascii = character.asciiValue { return ascii < 0x20 || ascii == 0x7F }
        return character.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    private func spelling(_ token: Token) -> String { snippet(token) }

    private func describe(_ token: Token) -> String {
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

extension ComparisonOperator {
    /// The operator with its sides swapped: `18 < age` is `age > 18`.
    fileprivate var flipped: ComparisonOperator {
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
    fileprivate var formatWrapped: Any? { map { $0 as Any } }
}

/// The collections a `%@` may pass to IN and BETWEEN.
fileprivate protocol FormatList {
    var formatElements: [Any] { get }
}

extension Array: FormatList {
    fileprivate var formatElements: [Any] { map { $0 as Any } }
}

extension ArraySlice: FormatList {
    fileprivate var formatElements: [Any] { map { $0 as Any } }
}

extension ContiguousArray: FormatList {
    fileprivate var formatElements: [Any] { map { $0 as Any } }
}

extension Set: FormatList {
    fileprivate var formatElements: [Any] { map { $0 as Any } }
}
