@testable import ContextStack
@testable import _ContextStackModel
import _ContextStackCore
import Foundation

/// An independent statement of what the newer parts of the format language mean — options on
/// every comparison, SELF, a value on the left of IN, CONTAINS on a to-many relationship, a
/// to-many key path without a quantifier, quantifiers through two to-many relationships,
/// constants on both sides, LIKE escapes, variables — over plain Swift values, for the
/// differential tests to check both the SQL path and the in-memory path against.
///
/// Each case renders itself as a format string with arguments (and variables for
/// `substituting`), and evaluates itself here, with SQL's three-valued logic written out:
/// `nil` is unknown, AND and OR absorb it as SQL does, NOT keeps it.
indirect enum ReferencePredicate: CustomStringConvertible {
    /// A text field of a person: their name, their location (optional), their friend's name
    /// (NULL without a friend).
    enum Field: String, CaseIterable {
        case name, location
        case friendName = "friend.name"
    }

    struct Options {
        var caseInsensitive = false
        var diacriticInsensitive = false
        var suffix: String {
            switch (caseInsensitive, diacriticInsensitive) {
            case (true, true): "[cd]"
            case (true, false): "[c]"
            case (false, true): "[d]"
            case (false, false): ""
            }
        }
    }

    /// `field op[options] %@`.
    case compare(Field, ComparisonOperator, String?, Options)
    /// `field BETWEEN[options] {%@, %@}`.
    case between(Field, String, String, Options)
    /// `field IN[options] %@` with a list.
    case oneOf(Field, [String?], Options)
    /// `field IN[options] %@` with a string: the field is a substring of it.
    case substringOf(Field, String, Options)
    /// `field LIKE[options] %@`, the pattern with backslash escapes.
    case like(Field, String, Options)
    /// `SELF == %@` (or `!=`) with a person.
    case isPerson(Int, equal: Bool)
    /// `SELF IN %@` with people.
    case isOneOf([Int])
    /// `%@ IN pets`, or `pets CONTAINS %@`, with a pet.
    case ownsPet(Int, writtenAsContains: Bool)
    /// `%@ IN[options] pets.name`: some pet has this name.
    case petNamed(String, Options)
    /// `pets.name op[options] %@` without a quantifier: some pet's name matches; CONTAINS is
    /// membership (some pet's name is the string).
    case somePetName(TextOperator, String, Options)
    /// `Q friendOf.pets.age op %@`: through two to-many relationships.
    case friendsPets(Quantifier, ComparisonOperator, Int)
    /// `%@ op %@` with two numbers.
    case constants(Int, ComparisonOperator, Int)
    /// `field ==[options] $value`, substituted.
    case variable(Field, String, Options)
    /// `quantifier friend.pets.age op n`: through a to-one hop, then a to-many relationship
    /// (nil for the quantifier left out, which means ANY).
    case friendPets(Quantifier?, ComparisonOperator, Int)
    /// `pets.@count op n`, `pets.@sum.age op n`, `@avg`, `@min`, `@max`.
    case petAggregate(CollectionFunction, ComparisonOperator, Int)
    /// `SUBQUERY(pets, $p, $p.age >= minAge [AND $p.name op[options] pattern] [AND $p.age * 10 <= age]).@count op n`:
    /// the last part reads the person outside the SUBQUERY.
    case petSubquery(minAge: Int, name: (TextOperator, String, Options)?, outer: Bool, ComparisonOperator, Int)
    /// `age op k cmp n`, or `k op age cmp n` with `flipped`; with `grouped`, `(…) * 2 cmp n`.
    case arithmetic(Condition.ArithmeticOperator, Int, flipped: Bool, grouped: Bool, ComparisonOperator, Int)
    case and(ReferencePredicate, ReferencePredicate)
    case or(ReferencePredicate, ReferencePredicate)
    case not(ReferencePredicate)

    /// The data a case is evaluated on, by index; IDs are filled in once it is stored.
    struct Person {
        var name: String
        var age: Int
        var location: String?
        var friend: Int?
    }

    struct Pet {
        var name: String
        var age: Int
        var owner: Int?
    }

    struct World {
        var people: [Person]
        var pets: [Pet]
        var personIDs: [ObjectID] = []
        var petIDs: [ObjectID] = []
    }

    // MARK: - Rendering

    /// The format string, its arguments, and the variables to substitute.
    func render(_ world: World) -> (format: String, arguments: [(any Sendable)?], variables: [String: (any Sendable)?]) {
        var arguments: [(any Sendable)?] = []
        var variables: [String: (any Sendable)?] = [:]
        func text(_ node: ReferencePredicate) -> String {
            switch node {
            case .compare(let field, let op, let value, let options):
                arguments.append(value)
                return "\(field.rawValue) \(op.rawValue)\(options.suffix) %@"
            case .between(let field, let low, let high, let options):
                arguments += [low, high]
                return "\(field.rawValue) BETWEEN\(options.suffix) {%@, %@}"
            case .oneOf(let field, let values, let options):
                arguments.append(values)
                return "\(field.rawValue) IN\(options.suffix) %@"
            case .substringOf(let field, let value, let options):
                arguments.append(value)
                return "\(field.rawValue) IN\(options.suffix) %@"
            case .like(let field, let pattern, let options):
                arguments.append(pattern)
                return "\(field.rawValue) LIKE\(options.suffix) %@"
            case .isPerson(let index, let equal):
                arguments.append(world.personIDs[index])
                return equal ? "SELF == %@" : "SELF != %@"
            case .isOneOf(let indexes):
                arguments.append(indexes.map { world.personIDs[$0] })
                return "SELF IN %@"
            case .ownsPet(let index, let contains):
                arguments.append(world.petIDs[index])
                return contains ? "pets CONTAINS %@" : "%@ IN pets"
            case .petNamed(let name, let options):
                arguments.append(name)
                return "%@ IN\(options.suffix) pets.name"
            case .somePetName(let op, let pattern, let options):
                arguments.append(pattern)
                return "pets.name \(op.rawValue)\(options.suffix) %@"
            case .friendsPets(let quantifier, let op, let age):
                arguments.append(age)
                return "\(quantifier.rawValue) friendOf.pets.age \(op.rawValue) %@"
            case .constants(let a, let op, let b):
                arguments += [a, b]
                return "%@ \(op.rawValue) %@"
            case .variable(let field, let value, let options):
                let name = "v\(variables.count)"
                variables[name] = value
                return "\(field.rawValue) ==\(options.suffix) $\(name)"
            case .friendPets(let quantifier, let op, let age):
                arguments.append(age)
                return "\(quantifier.map { $0.rawValue + " " } ?? "")friend.pets.age \(op.rawValue) %@"
            case .petAggregate(let function, let op, let n):
                arguments.append(n)
                return "pets.@\(function.rawValue)\(function == .count ? "" : ".age") \(op.rawValue) %@"
            case .petSubquery(let minAge, let name, let outer, let op, let n):
                arguments.append(minAge)
                var condition = "$p.age >= %@"
                if let (textOperator, pattern, options) = name {
                    arguments.append(pattern)
                    condition += " AND $p.name \(textOperator.rawValue)\(options.suffix) %@"
                }
                if outer { condition += " AND $p.age * 10 <= age" }
                arguments.append(n)
                return "SUBQUERY(pets, $p, \(condition)).@count \(op.rawValue) %@"
            case .arithmetic(let op, let k, let flipped, let grouped, let comparison, let n):
                var expression = flipped ? "\(k) \(op.rawValue) age" : "age \(op.rawValue) \(k)"
                if grouped { expression = "(\(expression)) * 2" }
                arguments.append(n)
                return "\(expression) \(comparison.rawValue) %@"
            case .and(let a, let b): return "(\(text(a)) AND \(text(b)))"
            case .or(let a, let b): return "(\(text(a)) OR \(text(b)))"
            case .not(let a): return "NOT (\(text(a)))"
            }
        }
        let format = text(self)
        return (format, arguments, variables)
    }

    var description: String { render(World(people: [], pets: [], personIDs: [], petIDs: [])).format }

    // MARK: - Evaluation

    /// Text as scalars, folded as the options say (`ReferenceText.fold`).
    static func folded(_ text: String, _ options: Options) -> [UInt32] {
        ReferenceText.fold(text, caseInsensitive: options.caseInsensitive, diacriticInsensitive: options.diacriticInsensitive).map(\.value)
    }

    /// Binary order of two texts: scalar values in order, which is UTF-8 byte order.
    static func order(_ a: String, _ b: String, _ options: Options) -> Int {
        let x = folded(a, options), y = folded(b, options)
        if x.lexicographicallyPrecedes(y) { return -1 }
        return x == y ? 0 : 1
    }

    /// A number that may be missing against a number: a missing one equals nothing, differs
    /// from everything, and is unknown to an ordering.
    static func compare(_ value: Double?, _ op: ComparisonOperator, _ wanted: Double) -> Bool? {
        guard let value else { return op == .equal ? false : op == .notEqual ? true : nil }
        return holds(op, value < wanted ? -1 : value == wanted ? 0 : 1)
    }

    static func holds(_ op: ComparisonOperator, _ order: Int) -> Bool {
        switch op {
        case .equal: order == 0
        case .notEqual: order != 0
        case .less: order < 0
        case .lessOrEqual: order <= 0
        case .greater: order > 0
        case .greaterOrEqual: order >= 0
        }
    }

    static func value(_ field: Field, of person: Int, in world: World) -> String? {
        let row = world.people[person]
        switch field {
        case .name: return row.name
        case .location: return row.location
        case .friendName: return row.friend.map { world.people[$0].name }
        }
    }

    /// Whether person `index` matches: `nil` is unknown.
    func evaluate(person index: Int, in world: World) -> Bool? {
        switch self {
        case .compare(let field, let op, let wanted, let options):
            let value = Self.value(field, of: index, in: world)
            switch (value, wanted) {
            case (let value?, let wanted?): return Self.holds(op, Self.order(value, wanted, options))
            case (nil, nil): return op == .equal ? true : op == .notEqual ? false : nil
            default: return op == .equal ? false : op == .notEqual ? true : nil
            }
        case .between(let field, let low, let high, let options):
            guard let value = Self.value(field, of: index, in: world) else { return nil }
            return Self.order(value, low, options) >= 0 && Self.order(value, high, options) <= 0
        case .oneOf(let field, let list, let options):
            if list.isEmpty { return false }
            guard let value = Self.value(field, of: index, in: world) else { return nil }
            if list.contains(where: { $0.map { Self.order(value, $0, options) == 0 } ?? false }) { return true }
            return list.contains(where: { $0 == nil }) ? nil : false
        case .substringOf(let field, let text, let options):
            guard let value = Self.value(field, of: index, in: world) else { return nil }
            return ReferenceText.evaluate(.contains, text, value, caseInsensitive: options.caseInsensitive, diacriticInsensitive: options.diacriticInsensitive)
        case .like(let field, let pattern, let options):
            return ReferenceText.evaluate(.like, Self.value(field, of: index, in: world), pattern,
                                          caseInsensitive: options.caseInsensitive, diacriticInsensitive: options.diacriticInsensitive)
        case .isPerson(let other, let equal):
            return (other == index) == equal
        case .isOneOf(let others):
            return others.contains(index)
        case .ownsPet(let pet, _):
            return world.pets[pet].owner == index
        case .petNamed(let name, let options):
            return world.pets.contains { $0.owner == index && Self.order($0.name, name, options) == 0 }
        case .somePetName(let op, let pattern, let options):
            let reference = ReferenceText.Operator(op)
            // CONTAINS on a to-many key path is membership, as for any collection: some pet is
            // named `pattern`.
            if op == .contains { return world.pets.contains { $0.owner == index && Self.order($0.name, pattern, options) == 0 } }
            return world.pets.contains {
                $0.owner == index && ReferenceText.evaluate(reference, $0.name, pattern, caseInsensitive: options.caseInsensitive,
                                                            diacriticInsensitive: options.diacriticInsensitive) == true
            }
        case .friendsPets(let quantifier, let op, let age):
            let friendsOf = world.people.indices.filter { world.people[$0].friend == index }
            let ages = world.pets.filter { pet in pet.owner.map(friendsOf.contains) ?? false }.map(\.age)
            switch quantifier {
            case .any: return ages.contains { Self.holds(op, $0 < age ? -1 : $0 == age ? 0 : 1) }
            case .all:
                // ALL over the friends, each over their pets: every pet of every friend.
                return ages.allSatisfy { Self.holds(op, $0 < age ? -1 : $0 == age ? 0 : 1) }
            case .none: return !ages.contains { Self.holds(op, $0 < age ? -1 : $0 == age ? 0 : 1) }
            }
        case .constants(let a, let op, let b):
            return Self.holds(op, a < b ? -1 : a == b ? 0 : 1)
        case .friendPets(let quantifier, let op, let age):
            // No friend: no pets, so ANY is false and ALL and NONE are true.
            let ages = world.people[index].friend.map { friend in world.pets.filter { $0.owner == friend }.map(\.age) } ?? []
            let holds = { (pet: Int) in Self.holds(op, pet < age ? -1 : pet == age ? 0 : 1) }
            switch quantifier ?? .any {
            case .any: return ages.contains(where: holds)
            case .all: return ages.allSatisfy(holds)
            case .none: return !ages.contains(where: holds)
            }
        case .petAggregate(let function, let op, let n):
            let ages = world.pets.filter { $0.owner == index }.map { Double($0.age) }
            let value: Double? = switch function {
            case .count: Double(ages.count)
            case .sum: ages.reduce(0, +)
            case .avg: ages.isEmpty ? nil : ages.reduce(0, +) / Double(ages.count)
            case .min: ages.min()
            case .max: ages.max()
            }
            return Self.compare(value, op, Double(n))
        case .petSubquery(let minAge, let name, let outer, let op, let n):
            let age = world.people[index].age
            let count = world.pets.filter { pet in
                guard pet.owner == index, pet.age >= minAge else { return false }
                if let (textOperator, pattern, options) = name {
                    let matched = ReferenceText.evaluate(ReferenceText.Operator(textOperator), pet.name, pattern, caseInsensitive: options.caseInsensitive,
                                                         diacriticInsensitive: options.diacriticInsensitive)
                    guard matched == true else { return false }
                }
                return !outer || pet.age * 10 <= age
            }.count
            return Self.holds(op, count < n ? -1 : count == n ? 0 : 1)
        case .arithmetic(let op, let k, let flipped, let grouped, let comparison, let n):
            let (x, y) = flipped ? (Double(k), Double(world.people[index].age)) : (Double(world.people[index].age), Double(k))
            var result: Double? = switch op {
            case .add: x + y
            case .subtract: x - y
            case .multiply: x * y
            case .divide: y == 0 ? nil : x / y
            case .power: Foundation.pow(x, y)
            }
            if grouped { result = result.map { $0 * 2 } }
            return Self.compare(result.flatMap { $0.isNaN ? nil : $0 }, comparison, Double(n))
        
        case .variable(let field, let wanted, let options):
            guard let value = Self.value(field, of: index, in: world) else { return false }
            return Self.order(value, wanted, options) == 0
        case .and(let a, let b):
            let x = a.evaluate(person: index, in: world), y = b.evaluate(person: index, in: world)
            if x == false || y == false { return false }
            return x == nil || y == nil ? nil : true
        case .or(let a, let b):
            let x = a.evaluate(person: index, in: world), y = b.evaluate(person: index, in: world)
            if x == true || y == true { return true }
            return x == nil || y == nil ? nil : false
        case .not(let a):
            return a.evaluate(person: index, in: world).map(!)
        }
    }

    // MARK: - Generation

    /// Names with case and diacritic variants, composed and decomposed forms, wildcards and
    /// backslashes as data (no U+0000: PostgreSQL refuses it).
    static let strings = ["Rex", "rex", "RÉX", "Réx", "re\u{301}x", "ré", "Monk", "monk", "é", "E", "", "a*b", "a\\b", "a?b", "Ω", "ω", "ß", "ss"]
    static let likePatterns = ["R*", "r?x", "*\\*b", "a\\*b", "a\\?b", "a\\\\b", "*é*", "?", "*", "\\", "m*K", "a*"]

    static func randomOptions(_ rng: inout SeededGenerator) -> Options {
        Options(caseInsensitive: Bool.random(using: &rng), diacriticInsensitive: Bool.random(using: &rng))
    }

    static func random(_ rng: inout SeededGenerator, in world: World, depth: Int = 0) -> ReferencePredicate {
        if depth < 2 && Int.random(in: 0..<4, using: &rng) == 0 {
            switch Int.random(in: 0..<3, using: &rng) {
            case 0: return .and(random(&rng, in: world, depth: depth + 1), random(&rng, in: world, depth: depth + 1))
            case 1: return .or(random(&rng, in: world, depth: depth + 1), random(&rng, in: world, depth: depth + 1))
            default: return .not(random(&rng, in: world, depth: depth + 1))
            }
        }
        let field = Field.allCases.randomElement(using: &rng)!
        let options = randomOptions(&rng)
        let string = { (rng: inout SeededGenerator) in strings.randomElement(using: &rng)! }
        let comparisons: [ComparisonOperator] = [.equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual]
        switch Int.random(in: 0..<18, using: &rng) {
        case 16:
            return .friendPets([nil, Quantifier.any, .all, Quantifier.none].randomElement(using: &rng)!, comparisons.randomElement(using: &rng)!, Int.random(in: 0..<6, using: &rng))
        case 0:
            let op = comparisons.randomElement(using: &rng)!
            let value: String? = op.isOrdering || Bool.random(using: &rng) ? string(&rng) : nil
            return .compare(field, op, value, options)
        case 1:
            let bounds = [string(&rng), string(&rng)]
            return .between(field, bounds[0], bounds[1], options)
        case 2: return .oneOf(field, (0..<Int.random(in: 0..<4, using: &rng)).map { _ in Int.random(in: 0..<5, using: &rng) == 0 ? nil : string(&rng) }, options)
        case 3: return .substringOf(field, ["Rexa", "monkey", "ré", "a*b!", "xyz", ""].randomElement(using: &rng)!, options)
        case 4: return .like(field, likePatterns.randomElement(using: &rng)!, options)
        case 5: return .isPerson(Int.random(in: 0..<world.people.count, using: &rng), equal: Bool.random(using: &rng))
        case 6: return .isOneOf((0..<Int.random(in: 0..<4, using: &rng)).map { _ in Int.random(in: 0..<world.people.count, using: &rng) })
        case 7: return .ownsPet(Int.random(in: 0..<world.pets.count, using: &rng), writtenAsContains: Bool.random(using: &rng))
        case 8: return .petNamed(string(&rng), options)
        case 9: return .somePetName([.beginsWith, .endsWith, .like, .contains].randomElement(using: &rng)!, ["R", "x", "r*", "é", "a\\*b"].randomElement(using: &rng)!, options)
        case 10: return .friendsPets([.any, .all, .none].randomElement(using: &rng)!, comparisons.randomElement(using: &rng)!, Int.random(in: 0..<6, using: &rng))
        case 11: return .constants(Int.random(in: 0..<3, using: &rng), comparisons.randomElement(using: &rng)!, Int.random(in: 0..<3, using: &rng))
        case 12: return .variable(field, string(&rng), options)
        case 13:
            return .petAggregate(CollectionFunction.allCases.randomElement(using: &rng)!, comparisons.randomElement(using: &rng)!, Int.random(in: 0..<8, using: &rng))
        case 14:
            let name: (TextOperator, String, Options)? = Bool.random(using: &rng)
                ? ([.beginsWith, .like, .contains].randomElement(using: &rng)!, ["R", "r*", "é", "x"].randomElement(using: &rng)!, options) : nil
            return .petSubquery(minAge: Int.random(in: 0..<5, using: &rng), name: name, outer: Bool.random(using: &rng),
                                comparisons.randomElement(using: &rng)!, Int.random(in: 0..<3, using: &rng))
        case 15:
            let op = [Condition.ArithmeticOperator.add, .subtract, .multiply, .divide, .power].randomElement(using: &rng)!
            let k = op == .power ? Int.random(in: -1..<3, using: &rng) : Int.random(in: 0..<4, using: &rng)
            return .arithmetic(op, k, flipped: Bool.random(using: &rng), grouped: Bool.random(using: &rng),
                               comparisons.randomElement(using: &rng)!, Int.random(in: 0..<60, using: &rng))
        default: return .compare(field, comparisons.randomElement(using: &rng)!, string(&rng), options)
        }
    }

    /// A world of `count` people and as many pets, with random names, friends and owners.
    static func randomWorld(_ rng: inout SeededGenerator, count: Int) -> World {
        var people: [Person] = []
        for _ in 0..<count {
            people.append(Person(name: strings.randomElement(using: &rng)!, age: Int.random(in: 0..<50, using: &rng),
                                 location: Bool.random(using: &rng) ? strings.randomElement(using: &rng)! : nil, friend: nil))
        }
        for index in people.indices where Int.random(in: 0..<3, using: &rng) > 0 {
            people[index].friend = Int.random(in: 0..<count, using: &rng)
        }
        var pets: [Pet] = []
        for _ in 0..<count {
            pets.append(Pet(name: strings.randomElement(using: &rng)!, age: Int.random(in: 0..<6, using: &rng),
                            owner: Int.random(in: 0..<4, using: &rng) == 0 ? nil : Int.random(in: 0..<count, using: &rng)))
        }
        return World(people: people, pets: pets)
    }
}
