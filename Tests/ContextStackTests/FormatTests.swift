@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

@Suite struct FormatTests {
    /// A format string, its arguments, and the condition the operators on `Key` build for it.
    struct Case: Sendable, CustomTestStringConvertible {
        let format: String
        let arguments: [(any Sendable)?]
        let expected: Condition

        init(_ format: String, _ arguments: (any Sendable)?..., is expected: Condition) {
            self.format = format
            self.arguments = arguments
            self.expected = expected
        }

        var testDescription: String { format }
    }

    /// The node a condition holds, with the kind of every value (`description` leaves kinds out).
    static func structure(_ condition: Condition) -> String { String(describing: condition.node) }

    /// The error a condition carries, if it failed to build.
    static func failure(_ condition: Condition) -> QueryError? {
        if case .invalid(let error) = condition.node { error } else { nil }
    }

    /// Every construct of the language on Person, each with the condition it means.
    static let cases: [Case] = [
        // Comparisons, every spelling.
        Case("name == 'Monk'", is: %"name" == "Monk"),
        Case("name = \"Monk\"", is: %"name" == "Monk"),
        Case("name != 'Monk'", is: %"name" != "Monk"),
        Case("name <> 'Monk'", is: %"name" != "Monk"),
        Case("age > 35", is: %"age" > 35),
        Case("age >= 35", is: %"age" >= 35),
        Case("age => 35", is: %"age" >= 35),
        Case("age < 18", is: %"age" < 18),
        Case("age <= 18", is: %"age" <= 18),
        Case("age =< 18", is: %"age" <= 18),
        Case("age>35", is: %"age" > 35),
        // Numbers.
        Case("age > 20.5", is: %"age" > 20.5),
        Case("age > 2.05e1", is: %"age" > 20.5),
        Case("age > 205E-1", is: %"age" > 20.5),
        Case("age > -1", is: %"age" > -1),
        Case("age > - 1.5", is: %"age" > -1.5),
        Case("age < 0x1F", is: %"age" < 31),
        Case("age < 0o17", is: %"age" < 15),
        Case("age < 0b101", is: %"age" < 5),
        Case("age > -9223372036854775808", is: %"age" > Int.min),
        Case("age < 9223372036854775807", is: %"age" < Int.max),
        // nil, booleans.
        Case("location == nil", is: %"location" == nil),
        Case("location = NULL", is: %"location" == nil),
        Case("location != nil", is: %"location" != nil),
        Case("location == %@", nil, is: %"location" == nil),
        Case("location != %@", String?.none, is: %"location" != nil),
        Case("nil == location", is: %"location" == nil),
        Case("age == TRUE", is: %"age" == true),
        Case("age == YES", is: %"age" == true),
        Case("age != FALSE", is: %"age" != false),
        Case("age != NO", is: %"age" != false),
        // Placeholders.
        Case("age > %@", 35, is: %"age" > 35),
        Case("age > %@", 20.5, is: %"age" > 20.5),
        Case("age > %d", 35, is: %"age" > 35),
        Case("age > %i", Int16(35), is: %"age" > 35),
        Case("age > %ld", Int64(35), is: %"age" > 35),
        Case("age > %lld", UInt8(35), is: %"age" > 35),
        Case("age > %f", 20.5, is: %"age" > 20.5),
        Case("age > %lf", Float(20.5), is: %"age" > 20.5),
        Case("age > %f", 20, is: %"age" > 20.0),
        Case("name == %@", "Monk", is: %"name" == "Monk"),
        Case("name == %@", Optional("Monk"), is: %"name" == "Monk"),
        Case("name == %@", "Monk".dropFirst(0), is: %"name" == "Monk"),
        Case("%K > %@", "age", 35, is: %"age" > 35),
        Case("%K == %@", "friend.name", "Knight", is: %"friend.name" == "Knight"),
        Case("friend.%K == 'Knight'", "name", is: %"friend.name" == "Knight"),
        Case("%K == %K", "name", Key("location"), is: %"name" == %"location"),
        // A value on the left: the operator flips.
        Case("35 < age", is: %"age" > 35),
        Case("35 <= age", is: %"age" >= 35),
        Case("18 > age", is: %"age" < 18),
        Case("18 >= age", is: %"age" <= 18),
        Case("'Monk' == name", is: %"name" == "Monk"),
        Case("%@ != name", "Monk", is: %"name" != "Monk"),
        // Key against key.
        Case("name == location", is: %"name" == %"location"),
        Case("name != location", is: %"name" != %"location"),
        Case("name > location", is: %"name" > %"location"),
        Case("age <= friend.age", is: %"age" <= %"friend.age"),
        // Key paths.
        Case("friend.age > 25", is: %"friend.age" > 25),
        Case("friend.friend.name == 'Farmer'", is: %"friend.friend.name" == "Farmer"),
        Case("friend == nil", is: %"friend" == nil),
        Case("friend.location == nil", is: %"friend.location" == nil),
        Case("#name == 'Monk'", is: %"name" == "Monk"),
        Case("friend.#name == 'Knight'", is: %"friend.name" == "Knight"),
        Case("pets.@count > 2", is: %"pets.@count" > 2),
        // AND, OR, NOT, precedence, parentheses.
        Case("age > 30 AND location == 'Taipei'", is: %"age" > 30 && %"location" == "Taipei"),
        Case("age > 30 && location == 'Taipei'", is: %"age" > 30 && %"location" == "Taipei"),
        Case("age < 15 OR location == 'Kyoto'", is: %"age" < 15 || %"location" == "Kyoto"),
        Case("age < 15 || location == 'Kyoto'", is: %"age" < 15 || %"location" == "Kyoto"),
        Case("NOT (age < 15 OR location == 'Kyoto')", is: !(%"age" < 15 || %"location" == "Kyoto")),
        Case("!(age != 3)", is: !(%"age" != 3)),
        Case("NOT NOT age > 3", is: !(!(%"age" > 3))),
        Case("not location > 'A'", is: !(%"location" > "A")),
        Case("age > 1 AND age < 50 AND name != 'x'", is: %"age" > 1 && %"age" < 50 && %"name" != "x"),
        Case("age < 15 OR age > 60 AND location == 'Kyoto'", is: %"age" < 15 || (%"age" > 60 && %"location" == "Kyoto")),
        Case("(age < 15 OR age > 60) AND location == 'Kyoto'", is: (%"age" < 15 || %"age" > 60) && %"location" == "Kyoto"),
        Case("NOT age < 15 AND name == 'Monk'", is: !(%"age" < 15) && %"name" == "Monk"),
        Case("age < 15 or not age > 30 and location != nil", is: %"age" < 15 || (!(%"age" > 30) && %"location" != nil)),
        Case("((age > 3))", is: %"age" > 3),
        Case("  age\t>\n3  ", is: %"age" > 3),
        Case("TRUEPREDICATE", is: Condition.all),
        Case("FALSEPREDICATE", is: Condition.none),
        Case("truepredicate AND age > 3", is: .all && %"age" > 3),
        Case("FALSEPREDICATE OR NOT TRUEPREDICATE", is: Condition.none || !Condition.all),
        // Strings.
        Case("name == 'it\\'s'", is: %"name" == "it's"),
        Case("name == \"say \\\"hi\\\"\"", is: %"name" == "say \"hi\""),
        Case("name == '\\n\\t\\r\\0\\\\'", is: %"name" == "\n\t\r\0\\"),
        Case("name == '\\u00C9lise'", is: %"name" == "Élise"),
        // Apple's other escapes: three octal digits (not \0 and then digits), \x and \U.
        Case("name == 'a\\012b\\101\\x41\\X4a\\U00E9'", is: %"name" == "a\nbAAJé"),
        Case("name == '\\0\\01'", is: %"name" == "\0\0" + "1"),
        Case("name == '\\uD83D\\uDE00'", is: %"name" == "😀"),
        Case("name == 'Élise'", is: %"name" == "Élise"),
        Case("name == \"a'b\"", is: %"name" == "a'b"),
        Case("name == ''", is: %"name" == ""),
        // String operators and their options.
        Case("name LIKE 'M?nk'", is: %"name"%.like("M?nk")),
        Case("name LIKE[c] %@", "m*", is: %"name"%.like("m*", options: .caseInsensitive)),
        Case("name like[c] 'm*'", is: %"name"%.like("m*", options: .caseInsensitive)),
        Case("name CONTAINS 'onk'", is: %"name"%.contains("onk")),
        Case("name CONTAINS[c] 'ONK'", is: %"name"%.contains("ONK", options: .caseInsensitive)),
        Case("name BEGINSWITH[cd] 'e'", is: %"name"%.beginsWith("e", options: [.caseInsensitive, .diacriticInsensitive])),
        Case("name BeginsWith [ dc ] 'e'", is: %"name"%.beginsWith("e", options: [.caseInsensitive, .diacriticInsensitive])),
        // Options in upper case, and repeated, as NSPredicate takes them.
        Case("name BEGINSWITH[CD] 'e'", is: %"name"%.beginsWith("e", options: [.caseInsensitive, .diacriticInsensitive])),
        Case("name CONTAINS[C] 'ONK'", is: %"name"%.contains("ONK", options: .caseInsensitive)),
        Case("name ENDSWITH[dd] 'k'", is: %"name"%.endsWith("k", options: .diacriticInsensitive)),
        Case("name ENDSWITH[d] 'k'", is: %"name"%.endsWith("k", options: .diacriticInsensitive)),
        Case("name MATCHES 'M.n.*'", is: %"name"%.matches("M.n.*")),
        Case("name MATCHES[c] 'm.*'", is: %"name"%.matches("m.*", options: .caseInsensitive)),
        Case("friend.name BEGINSWITH 'K'", is: %"friend.name"%.beginsWith("K")),
        // IN and BETWEEN.
        Case("age IN {18, 19}", is: %"age"%.in([18, 19])),
        Case("age in {18,19}", is: %"age"%.in([18, 19])),
        Case("age IN %@", [18, 19], is: %"age"%.in([18, 19])),
        Case("age IN %@", Set([18]), is: %"age"%.in([18])),
        Case("age IN {%@, %d}", 18, 19, is: %"age"%.in([18, 19])),
        Case("age IN {}", is: %"age"%.in([Int]())),
        Case("location IN %@", ["Kyoto", nil] as [String?], is: %"location"%.in(["Kyoto", nil] as [String?])),
        Case("NOT location IN {'Kyoto'}", is: !(%"location"%.in(["Kyoto"]))),
        Case("age BETWEEN {1, 18}", is: %"age"%.between(1, 18)),
        Case("age between {%@, %@}", 1, 18, is: %"age"%.between(1, 18)),
        Case("age BETWEEN %@", [1, 18], is: %"age"%.between(1, 18)),
        Case("friend.age BETWEEN {20, 30}", is: %"friend.age"%.between(20, 30)),
        Case("age BETWEEN {1.5, 18}", is: Condition(.between("age", .value(.double(1.5), .double), .value(.integer(18), .int)))),
        // Quantifiers (built; resolution does not support them yet).
        Case("ANY pets.name == 'Rex'", is: %"pets.name"%.any == "Rex"),
        // SELF.key is the key, as in Apple's grammar (`expression . expression`).
        Case("SELF.name == 'Monk'", is: %"name" == "Monk"),
        Case("self.friend.age > 3", is: %"friend.age" > 3),
        Case("ANY SELF.pets.name == 'Rex'", is: %"pets.name"%.any == "Rex"),
        Case("SOME pets.name == 'Rex'", is: %"pets.name"%.any == "Rex"),
        Case("any pets.name == %@", "Rex", is: %"pets.name"%.any == "Rex"),
        Case("ALL pets.age > 1", is: %"pets.age"%.all > 1),
        Case("NONE pets.name == 'Rex'", is: %"pets.name"%.none == "Rex"),
        Case("ANY pets.name != nil", is: %"pets.name"%.any != nil),
        Case("ANY pets.age <= 3", is: %"pets.age"%.any <= 3),
        Case("ANY pets.name LIKE[c] 'r*'", is: %"pets.name"%.any.like("r*", options: .caseInsensitive)),
        Case("ANY pets.age IN {1, 2}", is: %"pets.age"%.any.in([1, 2])),
        Case("ALL pets.age BETWEEN {1, 2}", is: %"pets.age"%.all.between(1, 2)),
        Case("NOT ANY friendOf.age > 3 AND age > 1", is: !(%"friendOf.age"%.any > 3) && %"age" > 1),
    ]

    @Test(arguments: cases)
    func buildsTheConditionTheOperatorsBuild(_ testCase: Case) {
        let built = Condition.where(testCase.format, argumentArray: testCase.arguments)
        #expect(Self.failure(built) == nil, "\(Self.failure(built)?.message ?? "")")
        #expect(Self.structure(built) == Self.structure(testCase.expected))
        #expect(built.description == testCase.expected.description)
    }

    @MainActor func names(_ world: MainContext, _ condition: Condition) throws -> [String] {
        try world.fetchAll(Person.self, condition, orderBy: .ascending("name")).map(\.name)
    }

    @Test(arguments: Setup.all) @MainActor
    func selectsWhatTheOperatorsSelect(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write(Fixtures.people)
        var matchedSome = 0
        for testCase in Self.cases {
            let expected = Result { try names(world, testCase.expected) }
            let actual = Result { try names(world, .where(testCase.format, argumentArray: testCase.arguments)) }
            switch (expected, actual) {
            case (.success(let expected), .success(let actual)):
                #expect(actual == expected, "\(testCase.format)")
                if !expected.isEmpty { matchedSome += 1 }
            case (.failure(let expected), .failure(let actual)):
                // The same error: quantifiers and @count, which resolution does not support yet.
                #expect(String(describing: actual) == String(describing: expected), "\(testCase.format)")
            default:
                Issue.record("\(testCase.format): the operators give \(expected), the format string gives \(actual)")
            }
        }
        #expect(matchedSome > 60)
        // Literal nil in a list has no kind (as a bare `nil`), unlike `[String?]` through the operators.
        #expect(try names(world, .where("location IN {'Kyoto', nil}")) == ["Monk"])
        #expect(try names(world, .where("NOT location IN {'Kyoto', NULL}")) == [])
        // A few worked answers, so a shared mistake would show.
        #expect(try names(world, .where("name LIKE[c] %@ AND (age > %@ OR friend.age BETWEEN {%@, %@})", "m*", 18, 60, 70)) == ["Monk", "monk"])
        #expect(try names(world, .where("18 < age AND location != 'Taipei'")) == ["Monk", "Élise"])
        #expect(try names(world, .where("friend.friend.name == %@", "Farmer")) == ["Warrior"])
        #expect(try names(world, .where("name BEGINSWITH[cd] %@", "e")) == ["Élise"])
    }

    @Test @MainActor func theContractExampleRuns() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait(Fixtures.people)
        let people = try world.fetchAll(Person.self, .where("name LIKE[c] %@ AND age > %@", "m*", 18))
        #expect(people.map(\.name) == ["Monk"])
        #expect(try world.fetchCount(Person.self, .where("age >= %d", 35)) == 3)
    }

    @Test func compilesToTheSameSQLAsTheOperators() throws {
        let model = try Model(Person.self, Pet.self)
        let person = try #require(model.graph.entity(named: "Person"))
        let format = Condition.where("name LIKE[c] %@ AND (age > %@ OR friend.age BETWEEN {%@, %@})", "m*", 18, 1, 5)
        let operators = %"name"%.like("m*", options: .caseInsensitive) && (%"age" > 18 || %"friend.age"%.between(1, 5))
        let sql = try CompiledQuery(entity: person, condition: format, orderBy: nil).fromWhere()
        let expected = try CompiledQuery(entity: person, condition: operators, orderBy: nil).fromWhere()
        #expect(sql.text == expected.text)
        #expect(sql.arguments == expected.arguments)
        #expect(sql.text == #"FROM "Person" AS t0 LEFT JOIN "Person" AS t1 ON t1."Z_PK" = t0."friend" WHERE (cs_text(?, ?, t0."name", ?) AND (t0."age" > ? OR t1."age" BETWEEN ? AND ?))"#)
        #expect(sql.arguments == [.integer(0), .integer(1), .text("m*"), .integer(18), .integer(1), .integer(5)])

        let flipped = try CompiledQuery(entity: person, condition: .where("18 < age AND location == nil AND name == location"), orderBy: nil).fromWhere()
        #expect(flipped.text == #"FROM "Person" AS t0 WHERE ((t0."age" > ? AND t0."location" IS NULL) AND t0."name" IS t0."location")"#)
        #expect(flipped.arguments == [.integer(18)])

        // Hostile text is a bound value, never SQL.
        let hostile = try CompiledQuery(entity: person, condition: .where("name == %@ OR name == 'x\\'); DROP TABLE Person;--'", "'; --"), orderBy: nil).fromWhere()
        #expect(hostile.text == #"FROM "Person" AS t0 WHERE (t0."name" IS ? OR t0."name" IS ?)"#)
        #expect(hostile.arguments == [.text("'; --"), .text("x'); DROP TABLE Person;--")])
    }

    @Test func quantifiersBuildTheQuantifiedNode() {
        #expect(String(describing: Condition.where("ANY pets.name == 'Rex'")) == String(describing: %"pets.name"%.any == "Rex"))
        #expect(String(describing: Condition.where("ANY pets.name == 'Rex'")) == #"ANY pets.name == "Rex""#)
        #expect(String(describing: Condition.where("ALL pets.age > %@", 1)) == String(describing: %"pets.age"%.all > 1))
        #expect(String(describing: Condition.where("NONE pets.name CONTAINS[c] 'x'"))
                == String(describing: %"pets.name"%.none.contains("x", options: .caseInsensitive)))
        guard case .quantified(.any, "pets.name", .compare("pets.name", .equal, .value(.text("Rex"), .some(.string)))) = Condition.where("SOME pets.name == 'Rex'").node else {
            Issue.record("SOME builds an ANY node")
            return
        }
    }

    // MARK: - Arguments of every kind

    @Test(arguments: Setup.all) @MainActor
    func objectsAndObjectIDs(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write(Fixtures.people)
        let farmer = try #require(try world.fetch(Person.self, %"name" == "Farmer"))
        let monk = try #require(try world.fetch(Person.self, %"name" == "Monk"))
        let pairs: [(Condition, Condition)] = [
            (.where("friend == %@", farmer), %"friend" == farmer),
            (.where("friend == %@", farmer.objectID), %"friend" == farmer.objectID),
            (.where("friend != %@", farmer), %"friend" != farmer),
            (.where("%@ == friend", farmer), %"friend" == farmer),
            (.where("friend == %@", Optional(farmer)), %"friend" == farmer),
            (.where("friend == %@", Person?.none), %"friend" == nil),
            (.where("friend.friend = %@", farmer), %"friend.friend" == farmer),
        ]
        for (format, operators) in pairs {
            #expect(Self.structure(format) == Self.structure(operators))
            #expect(try names(world, format) == names(world, operators))
        }
        #expect(try names(world, .where("friend == %@", farmer)) == ["Knight"])
        // IN with objects: the operators have no spelling for it, so compare with ORs.
        #expect(try names(world, .where("friend IN %@", [farmer, monk])) == names(world, %"friend" == farmer || %"friend" == monk))
        #expect(try names(world, .where("friend IN {%@, %@}", farmer.objectID, monk)) == ["Knight", "monk"])
        // Objects support only == and !=.
        let ordered = try #require(Self.failure(.where("friend < %@", farmer)))
        #expect(ordered.code == .invalidFormat)
        #expect(ordered.position == 9)
        #expect(ordered.message.contains("objects compare only with == and !=, not <"))
    }

    @Test(arguments: Setup.all) @MainActor
    func valuesOfEveryAttributeKind(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        let date = Date(timeIntervalSince1970: 1_000_000)
        let uuid = UUID()
        try await harness.write { update in
            for index in 0..<4 {
                let sample = try update.create(Sample.self)
                sample.int = index
                sample.flag = index.isMultiple(of: 2)
                sample.float = Float(index) + 0.5
                sample.date = date.addingTimeInterval(Double(index))
                sample.mood = [Mood.calm, .cheerful, .grumpy, .calm][index]
                sample.level = index < 2 ? .low : .high
                sample.optionalMood = index == 0 ? nil : .grumpy
                sample.optionalInt = index == 1 ? nil : index
                sample.decimal = Decimal(index) + Decimal(string: "0.25")!
                sample.data = Data([UInt8(index)])
                sample.uuid = index == 3 ? uuid : UUID()
                sample.url = URL(string: "https://example.com/\(index)")!
                sample.string = "s\(index)"
            }
            try update.commit()
        }
        func ints(_ condition: Condition) throws -> [Int] {
            try world.fetchAll(Sample.self, condition, orderBy: .ascending("int")).map(\.int)
        }
        let pairs: [(Condition, Condition, [Int])] = [
            (.where("mood == %@", Mood.grumpy), %"mood" == Mood.grumpy, [2]),
            (.where("mood != %@", Mood.calm), %"mood" != Mood.calm, [1, 2]),
            (.where("level == %@", Level.high), %"level" == Level.high, [2, 3]),
            (.where("optionalMood == %@", Mood?.some(.grumpy)), %"optionalMood" == Mood.grumpy, [1, 2, 3]),
            (.where("optionalMood == %@", Mood?.none), %"optionalMood" == nil, [0]),
            (.where("mood IN %@", [Mood.calm, .grumpy]), %"mood"%.in([Mood.calm, .grumpy]), [0, 2, 3]),
            (.where("optionalInt == nil"), %"optionalInt" == nil, [1]),
            (.where("optionalInt == %@", Int?.none), %"optionalInt" == nil, [1]),
            (.where("optionalInt >= %@", 2), %"optionalInt" >= 2, [2, 3]),
            (.where("flag == YES"), %"flag" == true, [0, 2]),
            (.where("flag == %@", false), %"flag" == false, [1, 3]),
            (.where("float > %f", Float(1.5)), %"float" > 1.5, [2, 3]),
            (.where("double == %@", 0.0), %"double" == 0.0, [0, 1, 2, 3]),
            (.where("date > %@", date.addingTimeInterval(1)), %"date" > date.addingTimeInterval(1), [2, 3]),
            (.where("date BETWEEN %@", [date, date.addingTimeInterval(1)]), %"date"%.between(date, date.addingTimeInterval(1)), [0, 1]),
            (.where("uuid == %@", uuid), %"uuid" == uuid, [3]),
            (.where("data == %@", Data([1])), %"data" == Data([1]), [1]),
            (.where("url == %@", URL(string: "https://example.com/2")!), %"url" == URL(string: "https://example.com/2")!, [2]),
            (.where("url BEGINSWITH %@", URL(string: "https://example.com/1")!), %"url"%.beginsWith("https://example.com/1"), [1]),
            (.where("decimal == %@", Decimal(string: "2.25")!), %"decimal" == Decimal(string: "2.25")!, [2]),
            (.where("int16 == %@", Int16(0)), %"int16" == Int16(0), [0, 1, 2, 3]),
            (.where("string IN %@", ["s1", "s3"]), %"string"%.in(["s1", "s3"]), [1, 3]),
        ]
        for (format, operators, expected) in pairs {
            #expect(Self.structure(format) == Self.structure(operators), "\(format)")
            #expect(try ints(format) == expected, "\(format)")
            #expect(try ints(operators) == expected, "\(operators)")
        }
        // The model still checks types: a literal number is not a date.
        #expect(throws: QueryError.self) { _ = try ints(.where("date > 3")) }
        #expect(throws: QueryError.self) { _ = try ints(.where("mood == 3")) }
    }

    // MARK: - Errors

    /// A malformed string, the offset it fails at, and what the message says.
    struct Failure: Sendable, CustomTestStringConvertible {
        let format: String
        let arguments: [(any Sendable)?]
        let position: Int
        let reason: String

        init(_ format: String, _ arguments: (any Sendable)?..., at position: Int, _ reason: String) {
            self.format = format
            self.arguments = arguments
            self.position = position
            self.reason = reason
        }

        var testDescription: String { format }
    }

    struct Opaque: Sendable {}

    static let failures: [Failure] = [
        // Malformed strings.
        Failure("", at: 0, "the format string is empty: expected a predicate such as \"name == %@\""),
        Failure("   ", at: 0, "the format string is empty"),
        Failure("age >", at: 5, "expected a key or a value after '>', found the end of the string"),
        Failure("age > AND name == 'x'", at: 6, "expected a key or a value after '>', found the keyword 'AND' (write #AND for a key of that name)"),
        Failure("age > 3 AND", at: 11, "expected a key or a value after 'AND', found the end of the string"),
        Failure("age", at: 3, "expected an operator (==, !=, <, <=, >, >=, IN, BETWEEN, LIKE, CONTAINS, BEGINSWITH, ENDSWITH or MATCHES) after 'age', found the end of the string"),
        Failure("age ~ 3", at: 4, "expected an operator (==, !=, <, <=, >, >=, IN, BETWEEN, LIKE, CONTAINS, BEGINSWITH, ENDSWITH or MATCHES) after 'age', found '~'"),
        Failure("age IS 3", at: 4, "expected an operator (==, !=, <, <=, >, >=, IN, BETWEEN, LIKE, CONTAINS, BEGINSWITH, ENDSWITH or MATCHES) after 'age', found 'IS'"),
        Failure("age & 3", at: 4, "expected an operator (==, !=, <, <=, >, >=, IN, BETWEEN, LIKE, CONTAINS, BEGINSWITH, ENDSWITH or MATCHES) after 'age', found '&'"),
        Failure("name == 'Monk", at: 8, "unterminated string: expected a closing ' before the end of the string"),
        Failure("name == \"Monk", at: 8, "unterminated string: expected a closing \" before the end of the string"),
        Failure("name == 'a\\q'", at: 10, "unknown escape: expected \\n, \\t, \\r, \\0, \\\\, \\', \\\", \\ooo (three octal digits), \\xhh or \\uXXXX"),
        Failure("name == '\\400'", at: 9, "an octal escape \\ooo is at most \\377"),
        Failure("name ==[n] 'a'", at: 8, "expected the options c, d or cd after '[', found 'n'"),
        Failure("name ==[l] 'a'", at: 8, "expected the options c, d or cd after '[', found 'l'"),
        Failure("age BETWEEN {$LOW, 3, $HIGH}", at: 12, "BETWEEN needs exactly two values, {low, high}, found 3"),
        Failure("age == {$LOW}", at: 7, "found a list of 1 item after ==: lists go only after IN or BETWEEN"),
        Failure("SUBQUERY(pets, $p, $p.age > 1 AND $p IN {$p}).@count > 0", at: 41, "$p is the SUBQUERY's member, not a value: a list holds values and variables given values with substituting(_:)"),
        Failure("name == '\\x4'", at: 9, "expected two hexadecimal digits after \\x"),
        Failure("name == '\\u12'", at: 9, "expected four hexadecimal digits after \\u"),
        Failure("name == '\\uDC00'", at: 9, "\\u escape is not a Unicode scalar (a lone surrogate)"),
        Failure("name == '\\uD800x'", at: 9, "a high surrogate \\u escape must be followed by a low surrogate"),
        Failure("(age > 3", at: 8, "expected AND, OR or ')' to close the '(' at offset 0, found the end of the string"),
        Failure("((age > 3) OR (age < 1)", at: 23, "expected AND, OR or ')' to close the '(' at offset 0"),
        Failure("age > 3)", at: 7, "unbalanced ')': there is no '(' for it to close"),
        Failure("age > 3 name == 'x'", at: 8, "expected AND, OR or the end of the string after the number 3, found 'name'"),
        Failure("()", at: 1, "expected a key or a value after '(', found ')'"),
        Failure("age > 99999999999999999999", at: 6, "the integer is too large for 64 bits"),
        Failure("age > 9223372036854775808", at: 6, "the integer is too large for a 64-bit signed integer"),
        Failure("age > -9223372036854775809", at: 6, "the integer is too small for a 64-bit signed integer"),
        Failure("age > 1e400", at: 6, "the number is out of range for a Double"),
        Failure("age > 0x", at: 6, "expected digits after '0x'"),
        Failure("age > - name", at: 8, "expected a number after '-', found 'name'"),
        Failure("age > %x", at: 6, "unknown placeholder: expected %@, %K, %d, %i, %ld, %lld, %f or %lf"),
        Failure("age > %", at: 6, "unknown placeholder"),
        Failure("# == 3", at: 0, "expected a key name after '#'"),
        Failure("friend.@ == 3", at: 7, "expected a name after '@', such as @count"),
        Failure("age > $", at: 6, "expected a variable name after '$', such as $name"),
        Failure("name LIKE nil", at: 10, "expected a string after LIKE, found nil"),
        Failure("friend. == 3", at: 8, "expected a key name after '.', found '=='"),
        Failure("name LIKE[x] 'a'", at: 10, "expected the options c, d or cd after '[', found 'x'"),
        Failure("name LIKE[c 'a'", at: 12, "expected ']' after the options, found the string 'a'"),
        Failure("name LIKE 3", at: 10, "expected a string after LIKE, found the number 3"),
        Failure("age IN 3", at: 7, "expected a list after IN, {a, b, …} or %@ with an array, found the number 3"),
        Failure("age BETWEEN {1, 2, 3}", at: 12, "BETWEEN needs exactly two values, {low, high}, found 3"),
        Failure("age BETWEEN 1", at: 12, "expected a list after BETWEEN, {low, high} or %@ with an array"),
        Failure("age == {1, 2}", at: 7, "found a list of 2 values after ==: lists go only after IN or BETWEEN"),
        Failure("age IN {1, {2}}", at: 11, "lists cannot be nested: expected a value, found '{'"),
        Failure("age IN {1, name}", at: 11, "expected a value in the list, found the key 'name'"),
        Failure("age IN {1 2}", at: 10, "expected ',' or '}' in the list that starts at offset 7, found the number 2"),
        Failure("age IN {1,}", at: 10, "expected a key or a value after ',', found '}'"),
        Failure("ANY 3 > 2", at: 4, "expected a key path through a to-many relationship after ANY (as in ANY pets.name == 'Rex'), found the number 3"),
        Failure("ANY pets.age > age", at: 15, "a quantified comparison compares members with a value, not with the key 'age'"),
        Failure("age > ANY pets.age", at: 6, "a quantifier goes at the start of a comparison"),
        Failure("age == 1 AND AND", at: 13, "expected a key or a value after 'AND', found the keyword 'AND' (write #AND for a key of that name)"),
        Failure("name == 'Élise' AND 🙂", at: 20, "expected a key or a value after 'AND', found '🙂'"),
        Failure("name == 'e\u{301}' ~ 1", at: 12, "expected AND, OR or the end of the string after the string 'é', found '~'"),
        // Arguments.
        Failure("age > %@ AND name == %@", 3, at: 21, "too few arguments: %@ is placeholder 2, but 1 was given"),
        Failure("age > %@", at: 6, "too few arguments: %@ is placeholder 1, but 0 were given"),
        Failure("%K == 3", at: 0, "too few arguments: %K is placeholder 1, but 0 were given"),
        Failure("age > %d", "x", at: 6, "%d (argument 1) needs an integer that fits in 64 bits, found a String"),
        Failure("age > %ld", 1.5, at: 6, "%ld (argument 1) needs an integer that fits in 64 bits, found a Double"),
        Failure("age > %d", UInt64.max, at: 6, "%d (argument 1) needs an integer that fits in 64 bits, found a UInt64"),
        Failure("age > %d", nil, at: 6, "%d (argument 1) needs an integer that fits in 64 bits, found nil"),
        Failure("age > %f", "1.5", at: 6, "%f (argument 1) needs a floating-point number, found a String"),
        Failure("%K == 3", 42, at: 0, "%K (argument 1) needs a key path as a String, found an Int"),
        Failure("%K == 3", nil, at: 0, "%K (argument 1) needs a key path as a String, found nil"),
        Failure("friend.%K == 3", ["name"], at: 7, "%K (argument 1) needs a key path as a String, found an Array<String>"),
        // Its options could not reach the operator: refused, not dropped.
        Failure("%K == %@", Key("name").caseInsensitive, "MONK", at: 0, "%K (argument 1) is the key 'name' with options"),
        Failure("age > %@", Opaque(), at: 6, "the argument for %@ (argument 1) is an Opaque, which a predicate cannot use: pass a String, a number"),
        Failure("age > %@", Key("age"), at: 6, "%@ (argument 1) is a Key: pass keys with %K"),
        Failure("age IN %@", [1, Opaque()] as [any Sendable], at: 7, "element 2 of the array for %@ (argument 1) is an Opaque, which a predicate cannot use"),
        Failure("age IN %@", [[1]], at: 7, "element 1 of the array for %@ (argument 1) is an Array<Int>"),
        Failure("age == %@", [1, 2], at: 7, "found the array for %@ (argument 1) after ==: lists go only after IN or BETWEEN"),
        Failure("age BETWEEN %@", [1], at: 12, "BETWEEN needs exactly two values, {low, high}, found 1"),
        Failure("name LIKE %@", 3, at: 10, "expected a string after LIKE, found the argument for %@ (argument 1, an Int)"),
        Failure("name LIKE %@", nil, at: 10, "expected a string after LIKE, found the argument for %@ (argument 1, nil)"),
        Failure("age IN {%@}", [1], at: 8, "lists cannot be nested: expected a value, found the array for %@ (argument 1)"),
    ]

    @Test(arguments: failures)
    func malformedStringsFailWithAPositionAndACaret(_ failure: Failure) throws {
        let condition = Condition.where(failure.format, argumentArray: failure.arguments)
        let error = try #require(Self.failure(condition), "\(condition)")
        #expect(error.code == .invalidFormat)
        #expect(error.position == failure.position)
        let lines = error.message.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.count == 3)
        #expect(lines[0].hasPrefix("Invalid format string at offset \(failure.position): \(failure.reason)"), "\(lines[0])")
        #expect(lines[0].hasSuffix("."))
        // The string, then a caret under the offending character (control characters as spaces).
        let shown = failure.format.map { $0.isWhitespace ? " " : String($0) }.joined()
        #expect(lines[1] == "    " + shown)
        #expect(lines[2] == "    " + String(repeating: " ", count: failure.position) + "^")
        // Using the condition throws the error, before any SQL.
        let model = try Model(Person.self, Pet.self)
        let person = try #require(model.graph.entity(named: "Person"))
        #expect {
            _ = try CompiledQuery(entity: person, condition: condition, orderBy: nil)
        } throws: { thrown in
            (thrown as? QueryError)?.code == .invalidFormat && (thrown as? QueryError)?.position == failure.position
        }
    }

    @Test @MainActor func fetchingAMalformedConditionThrows() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let expected = "Invalid format string at offset 25: expected a key or a value after '>', found the end of the string.\n"
            + "    name LIKE[c] %@ AND age >\n"
            + "    " + String(repeating: " ", count: 25) + "^"
        #expect {
            _ = try world.fetchAll(Person.self, .where("name LIKE[c] %@ AND age >", "m*"))
        } throws: { error in
            guard let error = error as? QueryError else { return false }
            return error.code == .invalidFormat && error.position == 25 && error.message == expected
        }
        // The model checks a condition that parses, as it checks any condition.
        func code(_ format: String) -> QueryError.Code? {
            do {
                _ = try world.fetchAll(Person.self, .where(format))
                return nil
            } catch {
                return (error as? QueryError)?.code
            }
        }
        #expect(code("nope == 3") == .unknownKey)
        #expect(code("age == 'x'") == .typeMismatch)
        #expect(code("age > nil") == .unsupported)
        #expect(code("name MATCHES '('") == .unsupported)
        #expect(code("pets == nil") == .unsupported)
        #expect(code("@sum.pets.age > 3") == .unknownKey, "a collection operator goes after the relationship")
    }

    @Test func longStringsShowAWindowAroundTheCaret() throws {
        let format = String(repeating: "age > 1 AND ", count: 30) + "age ~ 1" + String(repeating: " AND age > 1", count: 30)
        let position = 30 * 12 + 4
        let error = try #require(Self.failure(.where(format)))
        #expect(error.position == position)
        let lines = error.message.split(separator: "\n").map { Array($0.dropFirst(4)) }
        #expect(lines[1].first == "…" && lines[1].last == "…")
        #expect(lines[1].count == 102)
        let caret = try #require(lines[2].firstIndex(of: "^"))
        #expect(lines[1][caret] == "~")
        // Tabs and newlines show as spaces, so the caret still lines up.
        let multiline = try #require(Self.failure(.where("age > 1 AND\n\tname ~ 'x'")))
        #expect(multiline.position == 18)
        #expect(multiline.message.hasSuffix("\n    age > 1 AND  name ~ 'x'\n    " + String(repeating: " ", count: 18) + "^"))
    }

    // MARK: - Nesting

    /// The depth of a condition's node.
    static func depth(_ node: Condition.Node) -> Int {
        switch node {
        case .and(let a, let b), .or(let a, let b): max(depth(a), depth(b)) + 1
        case .not(let a), .quantified(_, _, let a): depth(a) + 1
        default: 1
        }
    }

    @Test func nestingIsBoundedAndLongChainsStayShallow() throws {
        let limit = FormatParser.maxDepth
        let deepest = String(repeating: "(", count: limit) + "age > 1" + String(repeating: ")", count: limit)
        #expect(Self.structure(.where(deepest)) == Self.structure(%"age" > 1))
        let tooDeep = try #require(Self.failure(.where("(" + deepest + ")")))
        #expect(tooDeep.position == limit)
        #expect(tooDeep.message.hasPrefix("Invalid format string at offset \(limit): the predicate nests deeper than \(limit) levels."))
        let nots = String(repeating: "NOT ", count: limit - 1) + "age > 1"
        #expect(Self.depth(Condition.where(nots).node) == limit)
        #expect(Self.failure(.where("!" + nots))?.position == 0)
        let bangs = try #require(Self.failure(.where(String(repeating: "!", count: 100_000) + "age > 1")))
        #expect(bangs.position == limit)
        #expect(Self.failure(.where(String(repeating: "(", count: 100_000)))?.position == limit)
        #expect(Self.failure(.where("age IN " + String(repeating: "{", count: 100_000)))?.position == 8)

        // A chain of AND that would nest too deep is balanced instead: the same meaning, shallow.
        let short = Condition.where(Array(repeating: "age > 1", count: limit).joined(separator: " AND "))
        #expect(Self.depth(short.node) == limit)
        #expect(Self.structure(short) == Self.structure((1..<limit).reduce(%"age" > 1) { c, _ in c && %"age" > 1 }))
        let long = Condition.where(Array(repeating: "age > %@", count: 20_000).joined(separator: " OR "),
                                   argumentArray: Array(repeating: 1, count: 20_000))
        #expect(Self.failure(long) == nil)
        #expect(Self.depth(long.node) <= 16)
        let mixed = Condition.where(Array(repeating: "(" + nots + ")", count: 300).joined(separator: " AND "))
        #expect(Self.failure(mixed)?.position == (limit - 1) * 4 + 7 + 2 + 1)
    }

    @Test @MainActor func aLongChainRunsAsTheShortOneDoes() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait(Fixtures.people)
        let chain = Condition.where(Array(repeating: "age > 12", count: 5_000).joined(separator: " AND ") + " AND location != nil")
        #expect(try names(world, chain) == names(world, %"age" > 12 && %"location" != nil))
        #expect(try names(world, chain) == ["Farmer", "Monk", "Warrior"])
    }
}
