@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation

/// Data sets that several suites read, each written by one update (which it commits). Pass
/// them to whatever starts the update: `try await harness.write(Fixtures.people)`,
/// `try world.beginUpdateAndWait(Fixtures.people)`.
enum Fixtures {
    /// Six people: names with case and accent variants, ages 12 to 63, some without a
    /// location, and friend chains (Knight → Farmer, Warrior → Knight, monk → Monk).
    static func people(_ update: Update) throws {
        let people = try makePeople(update, [
            ("Farmer", 28, "Taipei"), ("Knight", 18, nil), ("Monk", 63, "Kyoto"),
            ("Warrior", 35, "Taipei"), ("monk", 12, ""), ("Élise", 40, nil),
        ])
        people[1].friend = people[0]
        people[3].friend = people[1]
        people[4].friend = people[2]
        try update.commit()
    }

    /// Monk, aged 1; returns his ID.
    static func monkAgedOne(_ update: Update) throws -> ObjectID {
        let monk = try update.create(Person.self)
        monk.age = 1
        try update.commit()
        return monk.objectID
    }

    /// A person who owns pets of `names`; returns the person's ID.
    static func owner(ofPetsNamed names: [String], _ update: Update) throws -> ObjectID {
        let person = try update.create(Person.self)
        for name in names {
            let pet = try update.create(Pet.self)
            pet.name = name
            pet.owner = person
        }
        try update.commit()
        return person.objectID
    }

    /// Monk and the pet he owns; returns their IDs.
    static func monkAndPet(_ update: Update) throws -> (monk: ObjectID, pet: ObjectID) {
        let monk = try update.create(Person.self)
        monk.name = "Monk"
        let pet = try update.create(Pet.self)
        pet.owner = monk
        try update.commit()
        return (monk.objectID, pet.objectID)
    }

    /// Six people "a" to "f" aged 5 to 60 in Taipei, Kyoto or nowhere; a and b befriend c.
    static func agedPeople(_ update: Update) throws {
        let people = try makePeople(update, [("a", 10, "Taipei"), ("b", 20, "Taipei"), ("c", 60, "Kyoto"),
                                             ("d", 30, nil), ("e", 40, "Kyoto"), ("f", 5, "Taipei")])
        people[0].friend = people[2]
        people[1].friend = people[2]
        try update.commit()
    }

    /// People with these names, ages and locations, in order.
    private static func makePeople(_ update: Update, _ rows: [(String, Int, String?)]) throws -> [Person] {
        try rows.map { name, age, location in
            let person = try update.create(Person.self)
            person.name = name
            person.age = age
            person.location = location
            return person
        }
    }

    /// 25 people "p00" to "p24", each befriending the previous one, every third with two pets.
    static func chain(_ update: Update) throws {
        var previous: Person?
        for index in 0..<25 {
            let person = try update.create(Person.self)
            person.name = String(format: "p%02d", index)
            person.age = index
            person.friend = previous
            if index % 3 == 0 {
                for petIndex in 0..<2 {
                    let pet = try update.create(Pet.self)
                    pet.name = "pet\(index)-\(petIndex)"
                    pet.owner = person
                }
            }
            previous = person
        }
        try update.commit()
    }
}

extension MainContext {
    /// `count` new people, made in one update and committed, for tests that hold them (or
    /// their IDs).
    func committedPeople(_ count: Int) throws -> [Person] {
        try beginUpdateAndWait { update in
            let made = try (0..<count).map { _ in try update.create(Person.self) }
            try update.commit()
            return made
        }
    }
}
