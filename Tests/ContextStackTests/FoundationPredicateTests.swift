@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// `.predicate(#Predicate { … })`: translated to conditions, checked against Foundation's own
/// evaluation of the same predicate over every object.
@Suite struct FoundationPredicateTests {
    @MainActor private static func world(_ setup: Setup) async throws -> (TopologyHarness, MainContext) {
        let harness = try TopologyHarness(setup)
        try await harness.write(Fixtures.people)
        try await harness.write { update in
            let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
            for (name, age) in [("Rex", 3), ("Tom", 9)] {
                let pet = try update.create(Pet.self)
                pet.name = name
                pet.age = age
                pet.owner = monk
            }
            let knight = try #require(try update.fetch(Person.self, %"name" == "Knight"))
            let pet = try update.create(Pet.self)
            pet.name = "Mo"
            pet.age = 1
            pet.owner = knight
            try update.commit()
        }
        return (harness, harness.world)
    }

    /// The names the store returns for `predicate`, and the names Foundation's evaluation keeps.
    @MainActor private func both(_ world: MainContext, _ predicate: Predicate<Person>) throws -> (store: [String], foundation: [String]) {
        let stored = try world.fetchAll(Person.self, .predicate(predicate), orderBy: .ascending("name")).map(\.name)
        let all = try world.fetchAll(Person.self, orderBy: .ascending("name"))
        let evaluated = try all.filter { try predicate.evaluate($0) }.map(\.name)
        return (stored, evaluated)
    }

    @Test(arguments: Setup.all) @MainActor
    func translatedPredicatesAgreeWithFoundationEvaluation(setup: Setup) async throws {
        let (store, world) = try await Self.world(setup)
        _ = store
        let places: [String?] = ["Kyoto", "Taipei"], kyoto: [String?] = ["Kyoto"], kyotoOrNowhere: [String?] = ["Kyoto", nil]
        let predicates: [(String, Predicate<Person>)] = [
            ("comparison", #Predicate<Person> { $0.age > 18 }),
            ("and/starts", #Predicate<Person> { $0.age > 18 && $0.name.starts(with: "M") }),
            ("or/not", #Predicate<Person> { !($0.age < 30) || $0.name == "Knight" }),
            ("value first", #Predicate<Person> { 30 <= $0.age }),
            ("nil", #Predicate<Person> { $0.location == nil }),
            ("not nil", #Predicate<Person> { $0.location != nil }),
            ("optional value", #Predicate<Person> { $0.location != "Taipei" }),
            ("contains", #Predicate<Person> { $0.name.contains("onk") }),
            ("in list", #Predicate<Person> { [12, 18, 63].contains($0.age) }),
            // Swift's contains is two-valued for a nil property (SQL's IN with NULL is not).
            ("optional in list", #Predicate<Person> { places.contains($0.location) }),
            ("optional not in list", #Predicate<Person> { !kyoto.contains($0.location) }),
            ("optional in list with nil", #Predicate<Person> { kyotoOrNowhere.contains($0.location) }),
            ("optional not in list with nil", #Predicate<Person> { !kyotoOrNowhere.contains($0.location) }),
            ("to-one ?.", #Predicate<Person> { ($0.friend?.age ?? 0) > 20 }),
            ("to-one ?? true", #Predicate<Person> { ($0.friend?.age ?? 100) > 20 }),
            ("to-one nil", #Predicate<Person> { $0.friend == nil }),
            ("to-one condition", #Predicate<Person> { $0.friend.flatMap { $0.name.starts(with: "F") } ?? false }),
            ("if let", #Predicate<Person> { if let friend = $0.friend { friend.age < 30 } else { true } }),
            ("optional contains == true", #Predicate<Person> { $0.location?.contains("a") == true }),
            ("any member", #Predicate<Person> { $0.pets.contains { $0.age > 2 } }),
            ("any member compound", #Predicate<Person> { $0.pets.contains { $0.age > 2 && $0.name.starts(with: "T") } }),
            ("all members", #Predicate<Person> { $0.pets.allSatisfy { $0.age > 2 } }),
            ("member count", #Predicate<Person> { $0.pets.count >= 1 }),
            ("arithmetic", #Predicate<Person> { $0.age * 2 - 1 > 40 }),
            ("arithmetic on both sides", #Predicate<Person> { $0.age + 10 >= $0.pets.count * 20 }),
            ("unary minus", #Predicate<Person> { -$0.age < -30 }),
            ("filtered count", #Predicate<Person> { $0.pets.filter { $0.age > 2 }.count >= 2 }),
            ("filtered count compound", #Predicate<Person> { $0.pets.filter { $0.age > 2 && $0.name.starts(with: "R") }.count == 1 }),
            ("true", #Predicate<Person> { _ in true }),
        ]
        for (label, predicate) in predicates {
            let (stored, evaluated) = try both(world, predicate)
            #expect(stored == evaluated, "\(label)")
        }
    }

    @Test @MainActor func forcedUnwrapReadsNullInsteadOfCrashing() async throws {
        let (store, world) = try await Self.world(Setup(topology: .threeTier, kind: .memory))
        _ = store
        let names = try world.fetchAll(Person.self, .predicate(#Predicate<Person> { $0.friend!.age > 20 }), orderBy: .ascending("name")).map(\.name)
        #expect(names == ["Knight", "monk"])  // Knight → Farmer (28), monk → Monk (63); no friend: no match
    }

    @Test @MainActor func untranslatableShapesThrowNamingTheExpression() async throws {
        let (store, world) = try await Self.world(Setup(topology: .threeTier, kind: .memory))
        _ = store
        // Int division truncates in Swift; queries compute in Double, so it is refused, not changed.
        let division = #Predicate<Person> { $0.age / 2 > 20 }
        #expect {
            _ = try world.fetchAll(Person.self, .predicate(division))
        } throws: { error in
            guard let error = error as? QueryError else { return false }
            return error.code == .unsupported && error.message.contains("IntDivision") && error.message.contains("Double")
        }
        // A filter's test reads the members only.
        let outer = #Predicate<Person> { person in person.pets.filter { $0.age > person.age }.count > 0 }
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, .predicate(outer)) }
        let transient = #Predicate<Person> { $0.scratch > 1 }
        #expect {
            _ = try world.fetchAll(Person.self, .predicate(transient))
        } throws: { error in
            (error as? QueryError)?.code == .unsupported && "\(error)".contains("scratch")
        }
        let bothConstant = #Predicate<Person> { _ in 1 < 2 }
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, .predicate(bothConstant)) }
    }

    @Test @MainActor func predicatesCompileToTheSameSQLAsKeyConditions() throws {
        let store = try TestStore(.memory)
        let entity = store.stack.graph.entity(for: Person.self)
        func sql(_ condition: Condition) throws -> String {
            try CompiledQuery(entity: entity, condition: condition, orderBy: nil).fromWhere().text
        }
        #expect(try sql(.predicate(#Predicate<Person> { $0.age > 18 && $0.location == nil }))
                == (try sql(%"age" > 18 && %"location" == nil)))
        #expect(try sql(.predicate(#Predicate<Person> { $0.pets.contains { $0.name == "Rex" } }))
                == (try sql(%"pets.name"%.any == "Rex")))
        #expect(try sql(.predicate(#Predicate<Person> { $0.pets.filter { $0.age > 3 }.count > 1 }))
                == (try sql(.where("SUBQUERY(pets, $p, $p.age > 3).@count > 1"))))
        #expect(try sql(.predicate(#Predicate<Person> { $0.age + 1 > 30 })) == (try sql(.where("age + 1 > 30"))))
        // A non-optional property is never nil: its list is a plain IN.
        #expect(try sql(.predicate(#Predicate<Person> { [12, 18].contains($0.age) })) == (try sql(%"age"%.in([12, 18]))))
    }
}
