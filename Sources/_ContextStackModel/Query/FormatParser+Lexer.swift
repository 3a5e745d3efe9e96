import Foundation
import _ContextStackCore

/// The lexer of the format language: characters to tokens, with their positions.
extension FormatParser {
    // MARK: - Lexer

    func character(at index: Int) -> Character? {
        index < characters.count ? characters[index] : nil
    }

    static func isDigit(_ character: Character?, radix: Int = 10) -> Bool {
        digitValue(character, radix: radix) != nil
    }

    static func digitValue(_ character: Character?, radix: Int) -> UInt64? {
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
    static func isSpace(_ character: Character) -> Bool {
        if let ascii = character.asciiValue { return ascii == 0x20 || (0x09...0x0D).contains(ascii) }
        return character.isWhitespace
    }

    static func startsName(_ character: Character?) -> Bool {
        guard let character else { return false }
        return character == "_" || character.isLetter
    }

    static func continuesName(_ character: Character?) -> Bool {
        guard let character else { return false }
        return character == "_" || character.isLetter || character.isNumber
    }

    mutating func advance() throws(Failure) {
        previous = token
        token = try lex()
    }

    mutating func lex() throws(Failure) -> Token {
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
                guard Self.startsName(self.character(at: offset)) else {
                    throw Failure(position: start, reason: "expected a variable name after '$', such as $name")
                }
                kind = .variable(lexName())
            case "(": kind = .symbol(.openParen)
            case ")": kind = .symbol(.closeParen)
            case "{": kind = .symbol(.openBrace)
            case "}": kind = .symbol(.closeBrace)
            case "[": kind = .symbol(.openBracket)
            case "]": kind = .symbol(.closeBracket)
            case ",": kind = .symbol(.comma)
            case ".": kind = .symbol(.dot)
            case "-": kind = .symbol(.minus)
            case "+": kind = .symbol(.arithmetic(.add))
            case "/": kind = .symbol(.arithmetic(.divide))
            case "*":
                if self.character(at: offset) == "*" { offset += 1; kind = .symbol(.arithmetic(.power)) } else { kind = .symbol(.arithmetic(.multiply)) }
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

    mutating func lexName() -> String {
        let start = offset
        while Self.continuesName(character(at: offset)) { offset += 1 }
        return String(characters[start..<offset])
    }

    /// `%@ %K %d %i %ld %li %lld %lli %f %lf`, after the `%`.
    mutating func lexPlaceholder(start: Int) throws(Failure) -> Placeholder {
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
    mutating func lexNumber() throws(Failure) -> TokenKind {
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
    mutating func accumulate(radix: Int, start: Int) throws(Failure) -> UInt64 {
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
    mutating func lexString() throws(Failure) -> String {
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
            case let digit? where Self.digitValue(digit, radix: 8) != nil
                && Self.digitValue(self.character(at: offset + 1), radix: 8) != nil
                && Self.digitValue(self.character(at: offset + 2), radix: 8) != nil:
                // `\ooo`, three octal digits (`\012` is a newline, not `\0` and "12").
                let code = (0...2).reduce(UInt32(0)) { $0 << 3 | UInt32(Self.digitValue(self.character(at: offset + $1), radix: 8)!) }
                guard code <= 0o377 else {
                    throw Failure(position: escape, reason: "an octal escape \\ooo is at most \\377")
                }
                text.unicodeScalars.append(Unicode.Scalar(UInt8(code)))
                offset += 2
            case "0": text.append("\0")
            case "x", "X":
                guard let high = Self.digitValue(self.character(at: offset + 1), radix: 16),
                      let low = Self.digitValue(self.character(at: offset + 2), radix: 16) else {
                    throw Failure(position: escape, reason: "expected two hexadecimal digits after \\x")
                }
                text.unicodeScalars.append(Unicode.Scalar(UInt8(high << 4 | low)))
                offset += 2
            case "\\": text.append("\\")
            case "'": text.append("'")
            case "\"": text.append("\"")
            case "u", "U":
                var code = try lexUnicodeEscape(at: escape)
                if (0xD800...0xDBFF).contains(code) {
                    guard self.character(at: offset + 1) == "\\", self.character(at: offset + 2) == "u" || self.character(at: offset + 2) == "U" else {
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
                throw Failure(position: escape, reason: "unknown escape: expected \\n, \\t, \\r, \\0, \\\\, \\', \\\", \\ooo (three octal digits), \\xhh or \\uXXXX")
            }
            offset += 1
        }
        throw Failure(position: start, reason: "unterminated string: expected a closing \(quote) before the end of the string")
    }

    /// The four hex digits after the `u` at `offset` (the `\` is at `escape`); leaves `offset`
    /// on the last digit.
    mutating func lexUnicodeEscape(at escape: Int) throws(Failure) -> UInt32 {
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

}
