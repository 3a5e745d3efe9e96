@testable import ContextStack
import Foundation
import Testing

@Suite struct FetchOrCreateTests {
    @Test(arguments: StoreKind.allCases) @MainActor
    func createsWithTheEqualityValuesThenFindsTheSameObject(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let first = try world.beginUpdateAndWait { update in
            let knight = try update.fetchOrCreate(Person.self, %"name" == "Knight" && %"age" == 18)
            #expect(knight.isInserted)
            #expect(knight.name == "Knight" && knight.age == 18)
            #expect(try update.fetchOrCreate(Person.self, %"name" == "Knight" && %"age" == 18) === knight)
            try update.commit()
            return knight.objectID
        }
        let second = try world.beginUpdateAndWait { update in
            try update.fetchOrCreate(Person.self, %"name" == "Knight" && %"age" == 18).objectID
        }
        #expect(first == second)
        #expect(try world.fetchCount(Person.self) == 1)
    }

    @Test @MainActor func setsRelationshipsAndConvertsNumbers() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let farmer = try update.create(Person.self)
            let rex = try update.fetchOrCreate(Pet.self, %"owner" == farmer && %"name" == "Rex")
            #expect(rex.owner === farmer)
            #expect(farmer.pets == [rex])
            let sample = try update.fetchOrCreate(Sample.self, %"double" == 3 && %"int" == 4.0 && %"optionalString" == nil)
            #expect(sample.double == 3 && sample.int == 4 && sample.optionalString == nil)
            try update.commit()
        }
    }

    @Test @MainActor func otherShapesThrowBeforeCreatingAnything() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let invalid: [Condition] = [
            %"name" == "a" || %"age" == 1, %"age" > 3, !(%"name" == "a"), %"name" == %"location", %"friend.name" == "x", .all,
        ]
        for condition in invalid {
            #expect {
                try world.beginUpdateAndWait { update in
                    _ = try update.fetchOrCreate(Person.self, condition)
                    #expect(try update.fetchCount(Person.self) == 0)
                    try update.commit()
                }
            } throws: { error in
                (error as? QueryError)?.code == .invalidFetchOrCreate
            }
        }
        #expect(throws: QueryError.self) {
            try world.beginUpdateAndWait { update in _ = try update.fetchOrCreate(Person.self, %"nope" == 1) }
        }
        #expect(throws: QueryError.self) {
            try world.beginUpdateAndWait { update in _ = try update.fetchOrCreate(Sample.self, %"int" == 2.5) }
        }
        #expect(try world.fetchCount(Person.self) == 0)
    }
}

@Suite struct FetchOrCreateMissingTargetTests {
    @Test @MainActor func aMissingRelationshipTargetThrowsBeforeCreating() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let gone = try world.beginUpdateAndWait { update in
            let person = try update.create(Person.self)
            try update.commit()
            try update.delete(person)
            try update.commit()
            return person.objectID
        }
        #expect {
            try world.beginUpdateAndWait { update in
                _ = try update.fetchOrCreate(Pet.self, %"owner" == gone)
                try update.commit()
            }
        } throws: { error in
            (error as? QueryError)?.code == .objectNotFound
        }
        #expect(try world.fetchCount(Pet.self) == 0)
    }
}
