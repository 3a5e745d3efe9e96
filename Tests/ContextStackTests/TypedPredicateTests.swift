@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

@Suite struct TypedPredicateTests {
    @Test(arguments: Setup.all) @MainActor
    func keyPathsWorkLikeKeyStrings(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write(Fixtures.people)
        func names(_ condition: Condition, _ order: OrderBy = .ascending(\Person.name)) throws -> [String] {
            try world.fetchAll(Person.self, condition, orderBy: order).map(\.name)
        }
        #expect(try names(\Person.age > 18) == (try names(%"age" > 18)))
        #expect(try names(\Person.name == "Monk") == ["Monk"])
        #expect(try names(\Person.location == nil) == ["Knight", "Élise"])
        #expect(try names(\Person.age >= 28 && \Person.location != "Taipei") == ["Monk", "Élise"])
        let farmer = try #require(try world.fetch(Person.self, \Person.name == "Farmer"))
        #expect(try names(\Person.friend == farmer) == ["Knight"])
        #expect(try world.fetchAll(Person.self, \Person.name == "Monk", orderBy: .descending(\Person.age)).count == 1)
        #expect(try names(.all, .descending(\Person.age)) == ["Monk", "Élise", "Warrior", "Farmer", "Knight", "monk"])
    }

    @Test(arguments: Setup.all) @MainActor
    func keyPathsThatAreNotPersistedPropertiesThrowWhenUsed(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        #expect {
            _ = try world.fetchAll(Person.self, \Person.scratch > 1)  // @Transient
        } throws: { error in
            (error as? QueryError)?.code == .unknownKey
        }
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Sample.self, \Sample.computed > 1) }
        // A key path through a relationship names no property of the entity (use
        // `%"friend.age"` for that): Docs/Predicates.md.
        #expect { _ = try world.fetchAll(Person.self, \Person.friend?.age > 1) } throws: { ($0 as? QueryError)?.code == .unknownKey }
        #expect { _ = try world.fetchAll(Sample.self, \Sample.computed > 1) } throws: { ($0 as? QueryError)?.code == .unknownKey }
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, orderBy: .ascending(\Person.scratch)) }
    }

    @Test func subEntitiesNameInheritedKeyPaths() {
        #expect(Engineer._cs_key(for: \Engineer.language) == "language")
        #expect(Engineer._cs_key(for: \Engineer.name) == "name")
        #expect(Staff._cs_key(for: \Staff.team) == "team")
        #expect(Person._cs_key(for: \Person.scratch) == nil)
    }
}
