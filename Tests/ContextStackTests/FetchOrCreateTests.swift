@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

@Suite struct FetchOrCreateTests {
    @Test(arguments: Setup.all) @MainActor
    func createsWithTheEqualityValuesThenFindsTheSameObject(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        let first = try await harness.write { update in
            let knight = try update.fetchOrCreate(Person.self, %"name" == "Knight" && %"age" == 18)
            #expect(knight.isInserted)
            #expect(knight.name == "Knight" && knight.age == 18)
            #expect(try update.fetchOrCreate(Person.self, %"name" == "Knight" && %"age" == 18) === knight)
            try update.commit()
            return knight.objectID
        }
        let second = try await harness.write { update in
            try update.fetchOrCreate(Person.self, %"name" == "Knight" && %"age" == 18).objectID
        }
        #expect(first == second)
        #expect(try world.fetchCount(Person.self) == 1)
    }

    @Test(arguments: Setup.all) @MainActor
    func setsRelationshipsAndConvertsNumbers(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        try await harness.write { update in
            let farmer = try update.create(Person.self)
            let rex = try update.fetchOrCreate(Pet.self, %"owner" == farmer && %"name" == "Rex")
            #expect(rex.owner === farmer)
            #expect(farmer.pets == [rex])
            let sample = try update.fetchOrCreate(Sample.self, %"double" == 3 && %"int" == 4.0 && %"optionalString" == nil)
            #expect(sample.double == 3 && sample.int == 4 && sample.optionalString == nil)
            try update.commit()
        }
    }

    @Test(arguments: Setup.all) @MainActor
    func otherShapesThrowBeforeCreatingAnything(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        let invalid: [Condition] = [
            %"name" == "a" || %"age" == 1, %"age" > 3, !(%"name" == "a"), %"name" == %"location", %"friend.name" == "x", .all,
        ]
        for condition in invalid {
            await #expect {
                try await harness.write { update in
                    _ = try update.fetchOrCreate(Person.self, condition)
                    #expect(try update.fetchCount(Person.self) == 0)
                    try update.commit()
                }
            } throws: { error in
                (error as? QueryError)?.code == .invalidFetchOrCreate
            }
        }
        await #expect(throws: QueryError.self) {
            try await harness.write { update in _ = try update.fetchOrCreate(Person.self, %"nope" == 1) }
        }
        await #expect(throws: QueryError.self) {
            try await harness.write { update in _ = try update.fetchOrCreate(Sample.self, %"int" == 2.5) }
        }
        #expect(try world.fetchCount(Person.self) == 0)
    }
}

@Suite struct FetchOrCreateMissingTargetTests {
    @Test(arguments: Setup.all) @MainActor
    func aMissingRelationshipTargetThrowsBeforeCreating(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        let gone = try await harness.write { update in
            let person = try update.create(Person.self)
            try update.commit()
            try update.delete(person)
            try update.commit()
            return person.objectID
        }
        await #expect {
            try await harness.write { update in
                _ = try update.fetchOrCreate(Pet.self, %"owner" == gone)
                try update.commit()
            }
        } throws: { error in
            (error as? QueryError)?.code == .objectNotFound
        }
        #expect(try world.fetchCount(Pet.self) == 0)
    }
}
