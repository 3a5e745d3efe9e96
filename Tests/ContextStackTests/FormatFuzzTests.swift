@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// No format string may crash the parser: generated and mutated inputs, a fixed seed and a
/// fresh printed one (replay a failure by putting its seed in `propertySeeds()`).
@Suite struct FormatFuzzTests {
    /// Inputs per seed; two seeds run, so 100,000 inputs per run.
    static let inputsPerSeed = 50_000

    /// The words, operators and literals of the language, and near misses.
    static let vocabulary: [String] = [
        "name", "age", "location", "email", "friend", "friend.age", "friend.name", "friend.friend.location",
        "friendOf", "friendOf.age", "pets", "pets.name", "pets.age", "pets.@count", "@count", "#name", "#IN", "nope",
        "scratch", "Z_PK", ".", "..", "==", "=", "!=", "<>", "<", ">", "<=", ">=", "=<", "=>", "===", "!==",
        "BETWEEN", "IN", "LIKE", "CONTAINS", "BEGINSWITH", "ENDSWITH", "MATCHES", "like", "In", "between",
        "[c]", "[d]", "[cd]", "[dc]", "[x]", "[", "]", "[c", "AND", "OR", "NOT", "and", "or", "not", "&&", "||", "!",
        "&", "|", "ANY", "ALL", "SOME", "NONE", "any", "TRUEPREDICATE", "FALSEPREDICATE", "nil", "NULL", "TRUE",
        "FALSE", "YES", "NO", "(", ")", "((", "))", "{", "}", "{}", ",", "-", "+", "0", "1", "18", "-5", "2.5",
        "1e3", "1e400", "1e-400", "0x1F", "0x", "0b102", "0o7", "0xFFFFFFFFFFFFFFFF", "99999999999999999999",
        "-9223372036854775808", "9223372036854775807", "'Monk'", "\"a\\n\"", "'\\u00e9'", "'\\uD83D\\uDE00'",
        "'\\uD800'", "'\\uDC00'", "'\\u12'", "'\\q'", "'it\\'s'", "'", "\"", "'unterminated", "''", "%@", "%K",
        "%d", "%i", "%ld", "%lld", "%llld", "%f", "%lf", "%llf", "%x", "%", "%%", "$x", "$y", "$", "$1", "@", "#", "\\", "SELF",
        "SUBQUERY", "SUBQUERY(pets, $p, $p.age > 1).@count", "SUBQUERY(pets, $p,", "SUBQUERY(friendOf, $f, SUBQUERY($f.pets, $p, $p.age > $f.age).@count > 0).@sum.age",
        "$p", "$p.age", "$p.name", "$f.age", ").@count", ".@sum.age", "pets.@sum.age", "pets.@avg.age", "pets.@max.name", "@min", "@median",
        "*", "/", "**", "***", "+", "now()", "now", "now(", "(age + 1)", "2 ** 3", "age / 0", "🙂", "é", "e\u{301}", "\u{0}", "\t", "\n",
    ]

    /// Arguments of every kind, good and bad.
    struct Opaque: Sendable {}
    static let argumentPool: [(any Sendable)?] = [
        nil, "name", "age", "friend.age", "pets.name", "", "m*", "(", "%@", "'; DROP TABLE Person;--", 3, -1, 0, 2.5,
        Double.nan, Double.infinity, Float(1.5), Int64.max, Int64.min, UInt64.max, Int8(-3), true, false,
        [1, 2], [1, 2, 3], [Int](), ["a", nil] as [String?], Set([1]), [[1]], [Opaque()] as [any Sendable],
        Date(timeIntervalSince1970: 0), UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)), Data([0, 1]),
        URL(string: "https://example.com")!, Decimal(12), Mood.calm, Level.high, Mood?.none, Opaque(), Key("age"),
        ["k": 1], "x".dropFirst(0), 1...5,
    ]

    /// A format string and arguments: generated, mutated or extreme.
    static func input(_ rng: inout SeededGenerator) -> (String, [(any Sendable)?]) {
        // Per mille. Extreme inputs are long (a debug build parses one in ~10 ms), so they are rare.
        switch Int.random(in: 0..<1000, using: &rng) {
        case 0..<350: return (tokens(&rng), arguments(&rng))
        case 350..<500: return (characters(&rng), arguments(&rng))
        case 500..<880:
            let valid = FormatTests.cases.randomElement(using: &rng)!
            let arguments = Bool.random(using: &rng) ? valid.arguments : arguments(&rng)
            return (mutate(valid.format, &rng), arguments)
        case 880..<886: return (extreme(&rng), arguments(&rng))
        default:
            let (format, arguments, _) = predicate(&rng, depth: 3)
            return (format, arguments)
        }
    }

    static func arguments(_ rng: inout SeededGenerator) -> [(any Sendable)?] {
        (0..<Int.random(in: 0..<4, using: &rng)).map { _ in argumentPool.randomElement(using: &rng)! }
    }

    /// Random tokens of the language, with random separators.
    static func tokens(_ rng: inout SeededGenerator) -> String {
        var text = ""
        for _ in 0..<Int.random(in: 1..<25, using: &rng) {
            switch Int.random(in: 0..<10, using: &rng) {
            case 0: text += String(Int64.random(in: .min ... .max, using: &rng))
            case 1: text += "'" + characters(&rng).replacingOccurrences(of: "'", with: "") + "'"
            default: text += vocabulary.randomElement(using: &rng)!
            }
            text += [" ", " ", " ", "", "\n", "  "].randomElement(using: &rng)!
        }
        return text
    }

    static let specials: [Character] = [
        "\0", "\u{301}", "é", "🙂", "\u{FEFF}", "\r\n", "\u{202E}", "中", "\t", "\\", "'", "\"", "%", "@", "#",
        "$", "{", "}", "(", ")", "[", "]", "=", "<", ">", "!", "&", "|", ".", ",", "-", "0", "x", "e", "\u{10FFFF}",
        "👨‍👩‍👧", "\u{7F}", "\u{1}",
    ]

    /// Random characters: ASCII, the language's punctuation, and any Unicode scalar.
    static func characters(_ rng: inout SeededGenerator) -> String {
        var text = ""
        for _ in 0..<Int.random(in: 0..<40, using: &rng) {
            switch Int.random(in: 0..<20, using: &rng) {
            case 0..<11: text.append(Character(Unicode.Scalar(UInt8.random(in: 32..<127, using: &rng))))
            case 11..<17: text.append(specials.randomElement(using: &rng)!)
            default:
                let value = UInt32.random(in: 0...0x10FFFF, using: &rng)
                text.unicodeScalars.append(Unicode.Scalar(value) ?? "?")
            }
        }
        return text
    }

    /// A valid format string with its bytes flipped, inserted, deleted, duplicated or cut.
    static func mutate(_ format: String, _ rng: inout SeededGenerator) -> String {
        var bytes = Array(format.utf8)
        for _ in 0..<Int.random(in: 1...4, using: &rng) {
            let index = bytes.isEmpty ? 0 : Int.random(in: 0..<bytes.count, using: &rng)
            switch Int.random(in: 0..<8, using: &rng) {
            case 0 where !bytes.isEmpty: bytes[index] ^= 1 << UInt8.random(in: 0..<8, using: &rng)
            case 1: bytes.insert(UInt8.random(in: 0...255, using: &rng), at: index)
            case 2 where !bytes.isEmpty: bytes.remove(at: index)
            case 3 where !bytes.isEmpty: bytes[index] = Array("(){}[]'\"%@\\.,=<>!&|-#$ 0".utf8).randomElement(using: &rng)!
            case 4: bytes.insert(contentsOf: vocabulary.randomElement(using: &rng)!.utf8, at: index)
            case 5 where !bytes.isEmpty:
                let end = Int.random(in: index...bytes.count, using: &rng)
                bytes.insert(contentsOf: bytes[index..<end], at: end)
            case 6: bytes.removeSubrange(index..<bytes.count)
            default: bytes.insert(contentsOf: " AND ".utf8, at: index)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A SUBQUERY in a parenthesised operand parses predicates again: each '(' is tried as a
    /// group once, not once more at every level around it (2ⁿ tries, a parse that never ended
    /// for thirty levels). Counted, not timed.
    @Test func parenthesisedSubqueriesNestedDeepAreParsedInLinearTries() throws {
        for depth in [1, 5, 20] {
            let format = (0..<depth).map { "(SUBQUERY(\($0 == 0 ? "pets" : "$p\($0 - 1).friend.pets"), $p\($0), " }.joined()
                + "TRUEPREDICATE" + String(repeating: ").@count) > 0", count: depth)
            var parser = FormatParser(characters: Array(format), arguments: [])
            _ = try parser.parsePredicate()
            #expect(parser.groupsTried <= 2 * depth, "\(depth) levels: \(parser.groupsTried) tries")
        }
    }

    /// Deep nesting, long chains, huge literals.
    static func extreme(_ rng: inout SeededGenerator) -> String {
        let count = Int.random(in: 150..<3_000, using: &rng)
        switch Int.random(in: 0..<14, using: &rng) {
        case 10: return "age " + String(repeating: "+ 1 ", count: count) + "> 3"
        case 11: return String(repeating: "(", count: count) + "age + 1" + String(repeating: ")", count: Int.random(in: 0...count, using: &rng)) + " > 1"
        case 12: return "age" + String(repeating: " ** 2", count: count) + " > 1"
        case 13:
            let depth = count / 10
            return (0..<depth).map { "SUBQUERY(pets, $p\($0), " }.joined() + "$p\(depth - 1).age > 1" + String(repeating: ").@count > 0", count: depth)
        case 0: return String(repeating: "(", count: count) + "age > 1" + String(repeating: ")", count: Int.random(in: 0...count, using: &rng))
        case 1: return String(repeating: "NOT ", count: count) + "age > 1"
        case 2: return String(repeating: "!(", count: count / 2) + "age > 1" + String(repeating: ")", count: count / 2)
        case 3: return Array(repeating: "age > 1", count: count).joined(separator: [" AND ", " OR ", " && "].randomElement(using: &rng)!)
        case 4: return "age > " + String(repeating: "9", count: count)
        case 5: return "age > 0." + String(repeating: "0", count: count) + "1e" + String(repeating: "9", count: count % 40)
        case 6: return "name == '" + String(repeating: "\\u00e9x", count: count) + "'"
        case 7: return "age IN " + String(repeating: "{", count: count) + String(repeating: "}", count: count)
        case 8: return String(repeating: "friend.", count: count) + "age > 1"
        default: return Array(repeating: "(age > 1 OR NOT (name == 'x'))", count: count).joined(separator: " AND ")
        }
    }

    /// A random predicate from the language, with the arguments it needs and the condition the
    /// operators build for it.
    static func predicate(_ rng: inout SeededGenerator, depth: Int) -> (String, [(any Sendable)?], Condition) {
        if depth == 0 || Int.random(in: 0..<5, using: &rng) < 2 {
            let atom = FormatTests.cases.randomElement(using: &rng)!
            return ("(" + atom.format + ")", atom.arguments, atom.expected)
        }
        let (a, aArguments, aCondition) = predicate(&rng, depth: depth - 1)
        switch Int.random(in: 0..<3, using: &rng) {
        case 0:
            let (b, bArguments, bCondition) = predicate(&rng, depth: depth - 1)
            let and = ["AND", "and", "&&", "And"].randomElement(using: &rng)!
            return ("(\(a) \(and) \(b))", aArguments + bArguments, aCondition && bCondition)
        case 1:
            let (b, bArguments, bCondition) = predicate(&rng, depth: depth - 1)
            let or = ["OR", "or", "||"].randomElement(using: &rng)!
            return ("(\(a) \(or) \(b))", aArguments + bArguments, aCondition || bCondition)
        default:
            let not = ["NOT ", "not ", "!", "! "].randomElement(using: &rng)!
            return ("\(not)\(a)", aArguments, !aCondition)
        }
    }

    @Test(arguments: propertySeeds())
    func noInputCrashesTheParserOrResolution(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let model = try Model(Person.self, Pet.self)
        let person = try #require(model.graph.entity(named: "Person"))
        var parsed = 0
        var resolved = 0
        for iteration in 0..<Self.inputsPerSeed {
            let (format, arguments) = Self.input(&rng)
            let condition = Condition.where(format, argumentArray: arguments)
            if case .invalid(let error) = condition.node {
                // A format error always points into the string and shows the caret.
                let count = format.count
                let ok = error.code == .invalidFormat && (error.position.map { (0...count).contains($0) } ?? false)
                    && error.message.hasPrefix("Invalid format string at offset ") && error.message.hasSuffix("^")
                    && error.message.utf8.reduce(0, { $0 + ($1 == 0x0A ? 1 : 0) }) == 2
                if !ok {
                    Issue.record("seed \(seed), input \(iteration): \(String(reflecting: format)) gave \(error.message)")
                    return
                }
            } else {
                parsed += 1
                _ = condition.description
            }
            // Variables take any value, as arguments do.
            let substituted = Bool.random(using: &rng) ? condition
                : condition.substituting(["x": Self.argumentPool.randomElement(using: &rng)!, "y": Self.argumentPool.randomElement(using: &rng)!])
            if let query = try? CompiledQuery(entity: person, condition: substituted, orderBy: nil) {
                resolved += 1
                _ = query.fromWhere()
            }
        }
        print("format fuzz seed \(seed): \(Self.inputsPerSeed) inputs, \(parsed) parsed, \(resolved) resolved")
        // The inputs reach past the parser into resolution, not only into its error paths.
        #expect(parsed > Self.inputsPerSeed / 10)
        #expect(resolved > Self.inputsPerSeed / 20)
    }

    @Test(arguments: propertySeeds())
    func generatedPredicatesBuildWhatTheOperatorsBuild(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        for iteration in 0..<3_000 {
            let (format, arguments, expected) = Self.predicate(&rng, depth: 4)
            let built = Condition.where(format, argumentArray: arguments)
            guard FormatTests.structure(built) == FormatTests.structure(expected) else {
                Issue.record("seed \(seed), case \(iteration): \(format) built \(built), expected \(expected)")
                return
            }
        }
    }
}
