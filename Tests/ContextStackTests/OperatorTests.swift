@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

@Suite struct OperatorTests {
    @MainActor func names(_ world: MainContext, _ condition: Condition) throws -> [String] {
        try world.fetchAll(Person.self, condition, orderBy: .ascending("name")).map(\.name)
    }

    @Test(arguments: Setup.all) @MainActor
    func stringOperatorsWithCaseAndDiacriticOptions(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            for name in ["Monk", "monk", "MONKEY", "Mönch", "Élise", "e\u{301}lise", "Bob"] {
                try update.create(Person.self).name = name
            }
            try update.create(Person.self).location = "no name"
            try update.commit()
        }
        #expect(try names(world, %"name"%.contains("onk")) == ["Monk", "monk"])
        #expect(try names(world, %"name"%.contains("onk", options: .caseInsensitive)) == ["MONKEY", "Monk", "monk"])
        #expect(try names(world, %"name"%.beginsWith("M")) == ["MONKEY", "Monk", "Mönch"])
        #expect(try names(world, %"name"%.beginsWith("mo", options: [.caseInsensitive, .diacriticInsensitive])) == ["MONKEY", "Monk", "Mönch", "monk"])
        #expect(try names(world, %"name"%.endsWith("K", options: .caseInsensitive)) == ["Monk", "monk"])
        #expect(try names(world, %"name"%.beginsWith("e", options: .diacriticInsensitive)) == ["e\u{301}lise"])
        #expect(try names(world, %"name"%.beginsWith("e", options: [.caseInsensitive, .diacriticInsensitive])) == ["e\u{301}lise", "Élise"])
        #expect(try names(world, %"name"%.like("M?nk")) == ["Monk"])
        #expect(try names(world, %"name"%.like("m*", options: .caseInsensitive)) == ["MONKEY", "Monk", "Mönch", "monk"])
        #expect(try names(world, %"name"%.like("*o*")) == ["Bob", "Monk", "monk"])
        #expect(try names(world, %"name"%.matches("M.n.*")) == ["Monk", "Mönch"])
        #expect(try names(world, %"name"%.matches("M.n")) == [])  // the whole text must match
        #expect(try names(world, !(%"name"%.contains("o"))) == ["", "MONKEY", "Mönch", "e\u{301}lise", "Élise"])
        // A NULL value matches no string operator, nor its negation.
        #expect(try world.fetchCount(Person.self, %"location"%.contains("name")) == 1)
        #expect(try world.fetchCount(Person.self, !(%"location"%.contains("zzz"))) == 1)
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, %"age"%.contains("1")) }
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, %"name"%.matches("(")) }
    }

    @Test(arguments: Setup.all) @MainActor
    func inAndBetween(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            for (name, age, location) in [("a", 1, "x"), ("b", 5, nil), ("c", 18, "y"), ("d", 19, "x")] as [(String, Int, String?)] {
                let person = try update.create(Person.self)
                person.name = name
                person.age = age
                person.location = location
            }
            try update.commit()
        }
        #expect(try names(world, %"age"%.in([18, 19])) == ["c", "d"])
        #expect(try names(world, %"age"%.in([Int]())) == [])
        // An empty list holds nothing, NULL included, and its negation everything, NULL included.
        #expect(try names(world, %"location"%.in([String]())) == [])
        #expect(try names(world, !(%"location"%.in([String]()))) == ["a", "b", "c", "d"])
        #expect(try names(world, %"age"%.between(1, 5)) == ["a", "b"])
        #expect(try names(world, %"age"%.between(5, 1)) == [])
        #expect(try names(world, %"location"%.in(["x"])) == ["a", "d"])
        #expect(try names(world, !(%"location"%.in(["x"]))) == ["c"])  // NULL is unknown, negated too
        #expect(try names(world, %"location"%.in(["x", nil] as [String?])) == ["a", "d"])
        #expect(try names(world, %"age"%.in([1]) || %"age"%.between(18, 18)) == ["a", "c"])
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, %"age"%.in(["1"])) }
    }

    @Test func operatorsCompileToBoundSQL() throws {
        let model = try Model(Person.self, Pet.self)
        let person = try #require(model.graph.entity(named: "Person"))
        let query = try CompiledQuery(entity: person, condition: %"name"%.like("M*", options: .caseInsensitive)
                                      && %"age"%.in([1, 2]) && %"age"%.between(3, 4), orderBy: nil)
        let sql = query.fromWhere()
        #expect(sql.text == #"FROM "Person" AS t0 WHERE ((cs_text(?, ?, t0."name", ?) AND t0."age" IN (?, ?)) AND t0."age" BETWEEN ? AND ?)"#)
        #expect(sql.arguments == [.integer(0), .integer(1), .text("M*"), .integer(1), .integer(2), .integer(3), .integer(4)])
    }

    @Test(arguments: Setup.all) @MainActor
    func quantifiersAndCountOverToManyRelationships(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            let ann = try update.create(Person.self)
            ann.name = "Ann"
            let bob = try update.create(Person.self)
            bob.name = "Bob"
            try update.create(Person.self).name = "Cy"
            for (name, age, owner) in [("Rex", 3, ann), ("Tom", 1, ann), ("Max", 5, bob)] {
                let pet = try update.create(Pet.self)
                pet.name = name
                pet.age = age
                pet.owner = owner
            }
            let article = try update.create(Article.self)
            article.title = "news"
            let swift = try update.create(Tag.self)
            swift.name = "swift"
            article.tags = [swift]
            try update.commit()
        }
        #expect(try names(world, %"pets.name"%.any == "Rex") == ["Ann"])
        #expect(try names(world, %"pets.age"%.all > 2) == ["Bob", "Cy"])  // no pets: ALL holds
        #expect(try names(world, %"pets.age"%.none > 4) == ["Ann", "Cy"])
        #expect(try names(world, %"pets.@count" >= 1) == ["Ann", "Bob"])
        #expect(try names(world, %"pets.@count" == 2) == ["Ann"])
        #expect(try names(world, %"pets.name"%.any.beginsWith("M") || %"pets.@count" == 0) == ["Bob", "Cy"])
        #expect(try world.fetchAll(Article.self, %"tags.name"%.any == "swift").count == 1)
        #expect(try world.fetchAll(Tag.self, %"articles.@count" == 1).count == 1)
        // Pending changes inside an update are seen by quantifiers and counts too.
        try await harness.write { update in
            let cy = try #require(try update.fetch(Person.self, %"name" == "Cy"))
            let rex = try #require(try update.fetch(Pet.self, %"name" == "Rex"))
            rex.owner = cy
            #expect(try update.fetchAll(Person.self, %"pets.name"%.any == "Rex").map(\.name) == ["Cy"])
            #expect(try update.fetchCount(Person.self, %"pets.@count" == 1) == 3)
            let tag = try #require(try update.fetch(Tag.self))
            tag.articles = []
            #expect(try update.fetchCount(Article.self, %"tags.name"%.any == "swift") == 0)
        }
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, %"name"%.any == "x") }
        // Through a to-one hop, counts are refused (with .unsupported), not guessed; quantifiers
        // ask about the members of the object the hop leads to.
        #expect { _ = try world.fetchAll(Person.self, %"friend.pets.@count" > 1) } throws: { ($0 as? QueryError)?.code == .unsupported }
        let friendsOfRexsOwner = try world.fetchAll(Person.self, %"friend.pets.name"%.any == "Rex").map(\.name).sorted()
        let expected = try world.fetchAll(Person.self).filter { $0.friend?.pets.contains { $0.name == "Rex" } == true }.map(\.name).sorted()
        #expect(friendsOfRexsOwner == expected)
        let allOlder = try world.fetchAll(Person.self, %"friend.friendOf.age"%.all > 1).map(\.name).sorted()
        #expect(allOlder == (try world.fetchAll(Person.self).filter { $0.friend?.friendOf.allSatisfy { $0.age > 1 } ?? true }.map(\.name).sorted()))
    }
}

@Suite struct NaNTests {
    /// SQLite binds NaN as NULL; memory does the same, so pending and stored rows agree.
    @Test(arguments: Setup.all) @MainActor
    func nanIsNullInSQLAndInMemory(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            try update.create(Sample.self).optionalDouble = .nan
            try update.commit()
            try update.create(Sample.self).optionalDouble = .nan
            #expect(try update.fetchCount(Sample.self, %"optionalDouble" == Double.nan) == 2)
            #expect(try update.fetchCount(Sample.self, %"optionalDouble" == nil) == 2)
        }
        #expect(try world.fetch(Sample.self)?.optionalDouble == nil)
    }
}

@Suite struct CaseInsensitiveTextTests {
    /// `[c]` alone folds case, not accents, as in Apple's language: a letter keeps its accents
    /// (folded text is composed again), so "José" does not begin with "jose", and `?` takes "é"
    /// whole. `[d]` is what lets "é" match "e". On every setup: SQL on SQLite, in memory on
    /// PostgreSQL and for pending changes.
    @Test(arguments: Setup.all) @MainActor
    func caseInsensitiveKeepsALettersAccents(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            for name in ["José", "Mönch", "Élise", "한"] { try update.create(Person.self).name = name }
            try update.commit()
        }
        func names(_ condition: Condition) throws -> [String] {
            try world.fetchAll(Person.self, condition, orderBy: .ascending("name")).map(\.name)
        }
        #expect(try names(.where("name BEGINSWITH[c] 'jose' OR name CONTAINS[c] 'mo' OR name BEGINSWITH[c] 'e'")) == [])
        #expect(try names(.where("name LIKE[c] 'jose*'")) == [])
        #expect(try names(.where("name BEGINSWITH[c] 'JOSÉ' OR name CONTAINS[c] 'MÖ' OR name ==[c] 'élise'")) == ["José", "Mönch", "Élise"].sorted())
        #expect(try names(.where("name LIKE[c] 'jos?' OR name LIKE[c] '?'")) == ["José", "한"])
        #expect(try names(.where("name LIKE[d] '?'")) == ["한"])
        #expect(try names(.where("name BEGINSWITH[cd] 'jose' OR name CONTAINS[cd] 'mo' OR name BEGINSWITH[cd] 'e'")) == ["José", "Mönch", "Élise"].sorted())
    }
}

@Suite struct MatchesTests {
    /// MATCHES is about the whole text: the first match of `a|ab` in "ab" is "a", yet "ab" matches.
    @Test(arguments: Setup.all) @MainActor
    func matchesTheWholeTextWhateverTheAlternativesOrLaziness(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            for name in ["ab", "abc", "b"] { try update.create(Person.self).name = name }
            try update.commit()
        }
        #expect(try world.fetchAll(Person.self, %"name"%.matches("a|ab"), orderBy: .ascending("name")).map(\.name) == ["ab"])
        #expect(try world.fetchAll(Person.self, %"name"%.matches("a.*?"), orderBy: .ascending("name")).map(\.name) == ["ab", "abc"])
        #expect(TextMatch.evaluate(.matches, [], "ab", "a|ab"))
    }

    /// Anchoring the expression does not break one that ends inside a `\Q` quote or a `(?x)`
    /// comment (each took the anchor in, and the pattern did not compile).
    @Test(arguments: Setup.all) @MainActor
    func anExpressionEndingInAQuoteOrACommentIsAnchoredToo(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            for name in ["a.*", "abc", "Monk", "Monks"] { try update.create(Person.self).name = name }
            try update.commit()
        }
        #expect(try world.fetchAll(Person.self, %"name"%.matches(#"a\Q.*"#)).map(\.name) == ["a.*"])
        #expect(try world.fetchAll(Person.self, .where("name MATCHES %@", "(?x) M o n k  # the whole name")).map(\.name) == ["Monk"])
    }
}

/// SQLite joins at most 64 tables: 63 hops run, 64 throw `.unsupported` before any SQL,
/// naming the path, in the DSL and in format strings alike (Docs/Predicates.md, "Key paths").
@Suite struct JoinLimitTests {
    @Test(arguments: StoreKind.available) @MainActor
    func sixtyThreeHopsRunAndSixtyFourThrow(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let ada = try update.create(Person.self)
            (ada.name, ada.age) = ("Ada", 36)
            ada.friend = ada
            try update.commit()
        }
        func path(_ hops: Int) -> String { Array(repeating: "friend", count: hops).joined(separator: ".") + ".age" }
        #expect(try world.fetchAll(Person.self, Key(path(63)) > 30).map(\.name) == ["Ada"])
        #expect(try world.fetchCount(Person.self, .where("%K > 30", path(63))) == 1)
        for condition in [Key(path(64)) > 30, .where("%K > 30", path(64))] {
            #expect { _ = try world.fetchAll(Person.self, condition) } throws: { error in
                guard let error = error as? QueryError else { return false }
                return error.code == .unsupported && error.message.contains("64 hops")
            }
        }
    }
}
