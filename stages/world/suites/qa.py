"""``qa`` (general): short general-knowledge questions from small fact tables.

``What is the capital of Peru?`` -> ``Lima``; the (non-thinking) teacher
answers with the bare answer. The verifier (``{"type": "qa", "aliases": [...]}``,
reference = the answer) compares normalized text, so aliases such as ``USA``
for ``United States`` count. Difficulty 1..5 picks the tables: colors,
opposites, shapes and weekdays (1); small unit conversions, baby animals,
animal sounds and plurals (2); capitals and month arithmetic (3); countries
of capitals, chemical symbols and jobs (4); unit conversions with larger
numbers (5).
"""
from __future__ import annotations

import random

from compass.gym.verifiers.qa import normalize_answer
from stages.world.items import Item, verifier_spec
from stages.world.suites import Suite, register_suite

# (country, capital, aliases of the country, aliases of the capital)
CAPITALS = (
    ("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Germany", "Berlin"),
    ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Poland", "Warsaw"), ("Greece", "Athens"),
    ("Portugal", "Lisbon"), ("Austria", "Vienna"), ("Hungary", "Budapest"), ("Ireland", "Dublin"),
    ("Russia", "Moscow"), ("China", "Beijing", (), ("Peking",)), ("India", "New Delhi", (), ("Delhi",)),
    ("Thailand", "Bangkok"), ("Vietnam", "Hanoi", ("Viet Nam",)), ("Indonesia", "Jakarta"),
    ("Malaysia", "Kuala Lumpur"), ("Philippines", "Manila"), ("South Korea", "Seoul", ("Korea",)),
    ("Mexico", "Mexico City"), ("Argentina", "Buenos Aires"), ("Chile", "Santiago"),
    ("Colombia", "Bogota", (), ("Bogotá",)), ("Cuba", "Havana"), ("Canada", "Ottawa"), ("Australia", "Canberra"),
    ("New Zealand", "Wellington"), ("Turkey", "Ankara", ("Türkiye",)), ("Iran", "Tehran"), ("Iraq", "Baghdad"),
    ("Saudi Arabia", "Riyadh"), ("Nigeria", "Abuja"), ("Ghana", "Accra"), ("Ethiopia", "Addis Ababa"),
    ("Morocco", "Rabat"), ("Algeria", "Algiers"), ("Tunisia", "Tunis"), ("Belgium", "Brussels"),
    ("Netherlands", "Amsterdam", ("Holland",)), ("Switzerland", "Bern", (), ("Berne",)),
    ("Czech Republic", "Prague", ("Czechia",)), ("Romania", "Bucharest"), ("Bulgaria", "Sofia"),
    ("Serbia", "Belgrade"), ("Croatia", "Zagreb"), ("Ukraine", "Kyiv", (), ("Kiev",)), ("Iceland", "Reykjavik"),
    ("Estonia", "Tallinn"), ("Latvia", "Riga"), ("Lithuania", "Vilnius"), ("Pakistan", "Islamabad"),
    ("Bangladesh", "Dhaka"), ("Nepal", "Kathmandu"), ("Mongolia", "Ulaanbaatar"), ("Cambodia", "Phnom Penh"),
    ("Laos", "Vientiane"), ("Brazil", "Brasilia", (), ("Brasília",)), ("Venezuela", "Caracas"),
    ("Uruguay", "Montevideo"), ("Paraguay", "Asuncion", (), ("Asunción",)), ("Ecuador", "Quito"),
    ("Jamaica", "Kingston"), ("United Kingdom", "London", ("UK", "Britain", "Great Britain", "England")),
    ("United States", "Washington, D.C.", ("USA", "US", "United States of America", "America"),
     ("Washington", "Washington DC")),
    ("Qatar", "Doha"), ("Jordan", "Amman"), ("Lebanon", "Beirut"), ("Syria", "Damascus"),
    ("Afghanistan", "Kabul"), ("Uzbekistan", "Tashkent"), ("Zimbabwe", "Harare"), ("Zambia", "Lusaka"),
    ("Uganda", "Kampala"), ("Senegal", "Dakar"), ("Angola", "Luanda"), ("Madagascar", "Antananarivo"),
    ("Fiji", "Suva"), ("Taiwan", "Taipei"),
)
# (word, opposite, aliases of the opposite, aliases of the word): asked both ways
OPPOSITES = (
    ("hot", "cold"), ("big", "small", ("little",), ("large",)), ("fast", "slow", (), ("quick",)), ("up", "down"),
    ("happy", "sad", ("unhappy",)), ("open", "closed", ("shut",)), ("day", "night"), ("wet", "dry"),
    ("full", "empty"), ("rich", "poor"), ("early", "late"), ("first", "last"), ("strong", "weak"),
    ("loud", "quiet", ("silent",), ("noisy",)), ("push", "pull"), ("buy", "sell"), ("love", "hate"),
    ("true", "false"), ("inside", "outside"), ("above", "below", ("beneath",)), ("north", "south"),
    ("east", "west"), ("black", "white"), ("top", "bottom"), ("front", "back", ("rear",)), ("always", "never"),
    ("question", "answer"), ("give", "take", ("receive",)), ("on", "off"), ("in", "out"), ("yes", "no"),
    ("boy", "girl"), ("king", "queen"), ("man", "woman"), ("husband", "wife"), ("brother", "sister"),
    ("father", "mother"), ("son", "daughter"), ("uncle", "aunt"), ("clean", "dirty"), ("cheap", "expensive"),
    ("safe", "dangerous", ("unsafe",)), ("asleep", "awake"), ("remember", "forget"), ("increase", "decrease"),
    ("maximum", "minimum"), ("inner", "outer"), ("upper", "lower"), ("visible", "invisible"),
    ("possible", "impossible"), ("agree", "disagree"), ("begin", "end", ("finish",), ("start",)),
    ("sunrise", "sunset"), ("winter", "summer"), ("entrance", "exit"), ("success", "failure"),
    ("friend", "enemy", ("foe",)), ("ancient", "modern"), ("plus", "minus"), ("import", "export"),
    ("major", "minor"), ("sharp", "blunt", ("dull",)), ("floor", "ceiling"), ("before", "after"),
    ("arrival", "departure"), ("victory", "defeat"), ("accept", "reject", ("refuse",)),
)
# (word, opposite, aliases): asked one way only, the other way has several answers
ONE_WAY_OPPOSITES = (("tall", "short"), ("young", "old"), ("new", "old"), ("easy", "hard", ("difficult",)),
                     ("soft", "hard"), ("heavy", "light"), ("long", "short"), ("laugh", "cry"),
                     ("sweet", "sour", ("bitter",)), ("left", "right"), ("thick", "thin"), ("come", "go"),
                     ("win", "lose"), ("arrive", "leave", ("depart",)), ("dark", "light", ("bright",)))
COLORS = (("a ripe banana", "yellow"), ("fresh grass", "green"), ("snow", "white"), ("coal", "black"),
          ("the sky on a clear day", "blue"), ("a ripe tomato", "red"), ("a carrot", "orange"),
          ("milk chocolate", "brown"), ("a flamingo", "pink"), ("an eggplant", "purple", ("violet",)),
          ("fresh milk", "white"), ("a lemon", "yellow"), ("a crow", "black"), ("a polar bear", "white"),
          ("an emerald", "green"), ("a ruby", "red"), ("a sapphire", "blue"), ("a pumpkin", "orange"),
          ("a lime", "green"), ("a ripe strawberry", "red"), ("a school bus in the US", "yellow", ("orange",)),
          ("a fire truck", "red"), ("a lump of charcoal", "black"), ("a cloud on a sunny day", "white"),
          ("a frog", "green"), ("a tree trunk", "brown"), ("a raven", "black"), ("a canary", "yellow"),
          ("an orange", "orange"), ("a cucumber", "green"), ("the sea on a sunny day", "blue"),
          ("cocoa powder", "brown"), ("a swan", "white"), ("a lavender flower", "purple", ("violet",)),
          ("a stop sign", "red"), ("an egg yolk", "yellow"), ("a pine tree", "green"), ("a cardinal bird", "red"))
SHAPES = (("triangle", 3), ("square", 4), ("rectangle", 4), ("pentagon", 5), ("hexagon", 6), ("heptagon", 7),
          ("octagon", 8), ("nonagon", 9), ("decagon", 10), ("dodecagon", 12))
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
# (smaller unit, larger unit, its plural, how many smaller in one larger)
UNITS = (("centimeters", "meter", "meters", 100), ("millimeters", "centimeter", "centimeters", 10),
         ("meters", "kilometer", "kilometers", 1000), ("grams", "kilogram", "kilograms", 1000),
         ("milliliters", "liter", "liters", 1000), ("seconds", "minute", "minutes", 60),
         ("minutes", "hour", "hours", 60), ("hours", "day", "days", 24), ("days", "week", "weeks", 7),
         ("months", "year", "years", 12), ("years", "decade", "decades", 10),
         ("years", "century", "centuries", 100), ("eggs", "dozen", "dozens", 12), ("cents", "dollar", "dollars", 100),
         ("weeks", "fortnight", "fortnights", 2), ("players", "soccer team", "soccer teams", 11))
BABIES = (("cat", "kitten", ("kitty",)), ("dog", "puppy", ("pup",)), ("cow", "calf"), ("sheep", "lamb"),
          ("horse", "foal"), ("goat", "kid"), ("duck", "duckling"), ("frog", "tadpole"), ("kangaroo", "joey"),
          ("lion", "cub"), ("bear", "cub"), ("pig", "piglet"), ("goose", "gosling"), ("deer", "fawn"),
          ("owl", "owlet"), ("swan", "cygnet"), ("hen", "chick"), ("eagle", "eaglet"), ("tiger", "cub"),
          ("rabbit", "kit", ("bunny", "kitten")))
SOUNDS = (("cow", "moo"), ("dog", "woof", ("bark",)), ("cat", "meow", ("miaow", "purr")), ("sheep", "baa"),
          ("duck", "quack"), ("pig", "oink"), ("lion", "roar"), ("snake", "hiss"), ("owl", "hoot"),
          ("horse", "neigh"), ("bee", "buzz"), ("frog", "croak", ("ribbit",)), ("mouse", "squeak"),
          ("donkey", "bray", ("hee-haw",)), ("rooster", "cock-a-doodle-doo", ("crow",)))
PLURALS = (("child", "children"), ("mouse", "mice"), ("foot", "feet"), ("tooth", "teeth"), ("man", "men"),
           ("woman", "women"), ("goose", "geese"), ("person", "people", ("persons",)), ("ox", "oxen"),
           ("cactus", "cacti", ("cactuses",)), ("leaf", "leaves"), ("knife", "knives"), ("wolf", "wolves"),
           ("half", "halves"), ("city", "cities"), ("box", "boxes"), ("fish", "fish", ("fishes",)),
           ("sheep", "sheep"), ("deer", "deer"), ("baby", "babies"), ("potato", "potatoes"), ("bus", "buses"),
           ("life", "lives"), ("wife", "wives"), ("louse", "lice"), ("crisis", "crises"), ("index", "indices",
                                                                                              ("indexes",)))
LEGS = (("spider", 8), ("ant", 6), ("bee", 6), ("dog", 4), ("chicken", 2), ("horse", 4), ("beetle", 6),
        ("duck", 2), ("cat", 4), ("crab", 10), ("snake", 0), ("fish", 0), ("octopus", 8))
ELEMENTS = (("hydrogen", "H"), ("helium", "He"), ("carbon", "C"), ("nitrogen", "N"), ("oxygen", "O"),
            ("sodium", "Na"), ("magnesium", "Mg"), ("aluminium", "Al"), ("silicon", "Si"), ("phosphorus", "P"),
            ("sulfur", "S"), ("chlorine", "Cl"), ("potassium", "K"), ("calcium", "Ca"), ("iron", "Fe"),
            ("copper", "Cu"), ("zinc", "Zn"), ("silver", "Ag"), ("gold", "Au"), ("tin", "Sn"), ("lead", "Pb"),
            ("mercury", "Hg"), ("neon", "Ne"), ("argon", "Ar"), ("nickel", "Ni"), ("uranium", "U"),
            ("platinum", "Pt"), ("iodine", "I"), ("fluorine", "F"), ("lithium", "Li"), ("cobalt", "Co"),
            ("titanium", "Ti"))
JOBS = (("teaches students at a school", "teacher"), ("flies planes", "pilot"), ("looks after teeth", "dentist"),
        ("bakes bread", "baker"), ("writes books", "author", ("writer", "novelist")), ("grows crops", "farmer"),
        ("cuts hair", "barber", ("hairdresser",)), ("puts out fires", "firefighter", ("fireman",)),
        ("treats sick animals", "vet", ("veterinarian",)), ("designs buildings", "architect"),
        ("delivers letters", "mail carrier", ("postman", "mailman", "postwoman")),
        ("catches fish for a living", "fisherman", ("fisher",)), ("acts in films", "actor", ("actress",)),
        ("sells flowers", "florist"), ("makes things from wood", "carpenter", ("woodworker",)),
        ("repairs cars", "mechanic"), ("looks after a library", "librarian"),
        ("cooks in a restaurant", "chef", ("cook",)), ("plays the guitar", "guitarist"),
        ("studies the stars", "astronomer"), ("fixes water pipes", "plumber"),
        ("defends people in court", "lawyer", ("attorney",)), ("cares for patients in a hospital", "nurse"),
        ("sells meat", "butcher"), ("takes photos", "photographer"), ("travels into space", "astronaut"),
        ("reports the news", "journalist", ("reporter",)), ("works in a bank counting money", "cashier",
                                                            ("bank teller", "teller")))


def _pad(row: tuple, n: int) -> tuple:
    """A table row with its missing (optional) alias tuples as ()."""
    return tuple(row) + ((),) * (n - len(row))


def _fact(row: tuple) -> tuple[str, str, tuple[str, ...]]:
    """(question subject, answer, aliases) from a table row with optional aliases."""
    return _pad(row, 3)


# -- question makers: rng -> (question, answer, aliases, wrong answers to pick from) --------
def ask_color(rng):
    thing, color, aliases = _fact(rng.choice(COLORS))
    q = rng.choice(["What color is {t}?", "What is the usual color of {t}?", "{T} is usually what color?"])
    return _fmt(q, thing), color, aliases, sorted({c[1] for c in COLORS})


def ask_opposite(rng):
    rows = [_pad(r, 4) for r in OPPOSITES]
    pairs = [(a, b, b_aliases) for a, b, b_aliases, _ in rows] + [(b, a, a_aliases) for a, b, _, a_aliases in rows]
    pairs += [_fact(row) for row in ONE_WAY_OPPOSITES]
    word, opp, aliases = rng.choice(pairs)
    q = rng.choice(["What is the opposite of {t}?", "Give the opposite of {t}.",
                    "Which word means the opposite of {t}?"])
    return _fmt(q, word), opp, aliases, sorted({p[1] for p in pairs})


def ask_shape(rng):
    shape, n = rng.choice(SHAPES)
    q = rng.choice(["How many sides does a {t} have?", "A {t} has how many sides?"])
    return _fmt(q, shape), str(n), (), [str(k) for k in range(3, 13)]


def ask_weekday(rng):
    i, step = rng.randrange(7), rng.choice([1, -1])
    q = "What day comes after {t}?" if step == 1 else "What day comes before {t}?"
    return _fmt(q, DAYS[i]), DAYS[(i + step) % 7], (), list(DAYS)


def ask_units(rng, lo: int = 1, hi: int = 9):
    small, big, bigs, per = rng.choice(UNITS)
    k = rng.randint(lo, hi)
    what = (f"an {big}" if big == "hour" else f"a {big}") if k == 1 else f"{k} {bigs}"
    q = rng.choice([f"How many {small} are in {what}?", f"How many {small} make {what}?"])
    return q, str(per * k), (), [str(per * k + d) for d in (-per, per, -1, 1, 10) if per * k + d >= 0]


def ask_baby(rng):
    animal, baby, aliases = _fact(rng.choice(BABIES))
    q = rng.choice(["What is a baby {t} called?", "What do you call a young {t}?", "A baby {t} is called what?"])
    return _fmt(q, animal), baby, aliases, sorted({b[1] for b in BABIES})


def ask_sound(rng):
    animal, sound, aliases = _fact(rng.choice(SOUNDS))
    q = rng.choice(["What sound does a {t} make?", "Which sound does a {t} make?"])
    return _fmt(q, animal), sound, aliases, sorted({s[1] for s in SOUNDS})


def ask_plural(rng):
    word, plural, aliases = _fact(rng.choice(PLURALS))
    q = rng.choice(["What is the plural of {t}?", "Give the plural of the word {t}."])
    return _fmt(q, word), plural, aliases, sorted({p[1] for p in PLURALS} | {p[0] + "s" for p in PLURALS})


def ask_legs(rng):
    animal, n = rng.choice(LEGS)
    q = rng.choice(["How many legs does a {t} have?", "A {t} has how many legs?"])
    return _fmt(q, animal), str(n), (), [str(k) for k in range(0, 11)]


def ask_capital(rng):
    country, capital, _, aliases = _pad(rng.choice(CAPITALS), 4)
    q = rng.choice(["What is the capital of {t}?", "Which city is the capital of {t}?", "Name the capital city of {t}.",
                    "{T} has which city as its capital?"])
    return _fmt(q, country), capital, aliases, sorted(c[1] for c in CAPITALS)


def ask_month(rng):
    i, k = rng.randrange(12), rng.randint(1, 11)
    q = (f"Which month comes {k} months after {MONTHS[i]}?" if k > 1 else f"Which month comes after {MONTHS[i]}?")
    return q, MONTHS[(i + k) % 12], (), list(MONTHS)


def ask_country(rng):
    country, capital, aliases, _ = _pad(rng.choice(CAPITALS), 4)
    q = rng.choice(["{T} is the capital of which country?", "Which country has {t} as its capital?"])
    return _fmt(q, capital), country, aliases, sorted(c[0] for c in CAPITALS)


def ask_symbol(rng):
    name, sym = rng.choice(ELEMENTS)
    if rng.random() < 0.6:
        q = rng.choice(["What is the chemical symbol for {t}?", "Which symbol stands for the element {t}?"])
        return _fmt(q, name), sym, (), sorted(e[1] for e in ELEMENTS)
    return f"Which element has the chemical symbol {sym}?", name, ("aluminum",) if name == "aluminium" else (), \
        sorted(e[0] for e in ELEMENTS)


def ask_job(rng):
    does, job, aliases = _fact(rng.choice(JOBS))
    # no template may hold another's whole question: data_filter matches short eval prompts inside longer ones
    q = rng.choice(["What do you call a person who {t}?", "Name the job of someone who {t}."])
    return _fmt(q, does), job, aliases, sorted(j[1] for j in JOBS)


def _fmt(q: str, t: str) -> str:
    if t[0] in "aeiou":
        q = q.replace("a {t}", "an {t}").replace("A {t}", "An {t}")
    return q.replace("{t}", t).replace("{T}", t[0].upper() + t[1:])


LEVELS = {1: (ask_color, ask_opposite, ask_shape, ask_weekday),
          2: (ask_units, ask_baby, ask_sound, ask_plural, ask_legs),
          3: (ask_capital, ask_month),
          4: (ask_country, ask_symbol, ask_job),
          5: (lambda rng: ask_units(rng, 10, 99),)}


def make_qa(rng: random.Random, item_id: str, level: int, language: str = "en") -> Item:
    question, answer, aliases, pool = rng.choice(LEVELS[level])(rng)
    accepted = {normalize_answer(a) for a in (answer, *aliases)}
    wrongs = [w for w in pool if normalize_answer(w) not in accepted]
    return Item(item_id, "general", "qa", "en", question, answer, verifier_spec("qa", aliases=list(aliases)), level,
                answer, {"aliases": list(aliases), "wrongs": wrongs})


def wrong_qa_response(rng: random.Random, item: Item) -> str:
    return rng.choice(item.extra["wrongs"])


def alt_qa_response(rng: random.Random, item: Item) -> str:
    """An alias when there is one, else the answer as a sentence fragment with a full stop."""
    aliases = item.extra["aliases"]
    return rng.choice(aliases) if aliases else item.reference + "."


SUITE = register_suite(Suite(
    name="qa", domain="general", make=make_qa, wrong=wrong_qa_response, alt=alt_qa_response,
    languages=("en",), reasoning=False,
    description="general-knowledge questions (capitals, opposites, colors, units, animals, words, elements, jobs)"))
