"""The built-in Spanish→English demo corpus, generated from a small grammar.

It is made for looking at attention: Spanish puts most adjectives after the noun and English
before it ("el gato negro" → "the black cat"), so a good cross-attention alignment crosses.
It also has gender and number agreement (negro/negra/negros/negras → black), verb agreement
(duerme/duermen → sleeps/sleep), the contractions del and al (→ "of the", "to the"), a/an,
one-to-many words (busca → "looks for", en casa → "at home"), prepositional phrases and
coordination, in sentences of 3 to about 20 words.

Every sentence comes with its gold word alignment (Pharaoh ``i-j``: Spanish word i, English
word j), so alignments read from attention can be scored. The translation is a function of
the Spanish sentence, so a perfect model scores BLEU 100. Nothing is stored in the repository:
``generate`` is deterministic for a seed, and the splits never share a Spanish sentence.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

# Nouns: Spanish singular, plural, gender (m/f), English singular, plural.
NOUNS = """
gato gatos m cat cats | perro perros m dog dogs | pájaro pájaros m bird birds
caballo caballos m horse horses | ratón ratones m mouse mice | pez peces m fish fish
niño niños m boy boys | niña niñas f girl girls | hombre hombres m man men
mujer mujeres f woman women | amigo amigos m friend friends | maestro maestros m teacher teachers
médico médicos m doctor doctors | vecino vecinos m neighbour neighbours | hermano hermanos m brother brothers
hermana hermanas f sister sisters | abuelo abuelos m grandfather grandfathers | abuela abuelas f grandmother grandmothers
rey reyes m king kings | reina reinas f queen queens | soldado soldados m soldier soldiers
libro libros m book books | mesa mesas f table tables | silla sillas f chair chairs
coche coches m car cars | casa casas f house houses | puerta puertas f door doors
ventana ventanas f window windows | árbol árboles m tree trees | flor flores f flower flowers
manzana manzanas f apple apples | carta cartas f letter letters | camisa camisas f shirt shirts
sombrero sombreros m hat hats | zapato zapatos m shoe shoes | llave llaves f key keys
caja cajas f box boxes | pelota pelotas f ball balls | taza tazas f cup cups
río ríos m river rivers | parque parques m park parks | jardín jardines m garden gardens
calle calles f street streets | ciudad ciudades f city cities | escuela escuelas f school schools
tienda tiendas f shop shops | iglesia iglesias f church churches | puente puentes m bridge bridges
montaña montañas f mountain mountains | playa playas f beach beaches | isla islas f island islands
estación estaciones f station stations | barco barcos m boat boats | tren trenes m train trains
"""

# Places that people and animals go to (objects of "va a", "en", "cerca de", ...).
PLACES = "casa parque jardín calle ciudad escuela tienda iglesia puente montaña playa isla estación río río árbol mesa".split()
ANIMATE = "gato perro pájaro caballo ratón niño niña hombre mujer amigo maestro médico vecino hermano hermana abuelo abuela rey reina soldado".split()
THINGS = "libro mesa silla coche casa puerta ventana árbol flor manzana carta camisa sombrero zapato llave caja pelota taza barco tren".split()

# Adjectives: Spanish masculine singular, feminine singular, masculine plural, feminine plural, English.
ADJECTIVES = """
negro negra negros negras black | blanco blanca blancos blancas white | rojo roja rojos rojas red
azul azul azules azules blue | verde verde verdes verdes green | amarillo amarilla amarillos amarillas yellow
pequeño pequeña pequeños pequeñas small | grande grande grandes grandes big | viejo vieja viejos viejas old
nuevo nueva nuevos nuevas new | alto alta altos altas tall | bonito bonita bonitos bonitas pretty
feo fea feos feas ugly | rápido rápida rápidos rápidas fast | lento lenta lentos lentas slow
feliz feliz felices felices happy | triste triste tristes tristes sad | rico rica ricos ricas rich
pobre pobre pobres pobres poor | limpio limpia limpios limpias clean | sucio sucia sucios sucias dirty
famoso famosa famosos famosas famous | cansado cansada cansados cansadas tired | enorme enorme enormes enormes huge
"""

# Intransitive verbs: Spanish 3sg, 3pl, English 3sg, plural.
INTRANSITIVE = """
duerme duermen sleeps sleep | come comen eats eat | corre corren runs run | canta cantan sings sing
trabaja trabajan works work | juega juegan plays play | camina caminan walks walk | espera esperan waits wait
vive viven lives live | baila bailan dances dance | llora lloran cries cry | descansa descansan rests rest
"""

# Transitive verbs; English may take two words ("looks for").
TRANSITIVE = """
ve ven sees see | tiene tienen has have | compra compran buys buy | lleva llevan carries carry
quiere quieren wants want | encuentra encuentran finds find | lava lavan washes wash | vende venden sells sell
busca buscan looks_for look_for | mira miran looks_at look_at | necesita necesitan needs need | pinta pintan paints paint
"""

# Prepositions before a noun phrase: Spanish words (last may contract with "el"), English words.
PREPOSITIONS = """
en in | con with | sin without | cerca_de near | debajo_de under | detrás_de behind
delante_de in_front_of | junto_a next_to | sobre on | hacia towards
"""

ADVERBS = "hoy today | ahora now | aquí here | allí there | siempre always | también too"
DETERMINERS = {  # kind -> (m sg, f sg, m pl, f pl), English sg, English pl
    "def": (("el", "la", "los", "las"), "the", "the"),
    "indef": (("un", "una", "unos", "unas"), "a", "some"),
    "this": (("este", "esta", "estos", "estas"), "this", "these"),
    "my": (("mi", "mi", "mis", "mis"), "my", "my"),
    "many": (("mucho", "mucha", "muchos", "muchas"), None, "many"),
    "two": (("dos", "dos", "dos", "dos"), None, "two"),
}
CONTRACTIONS = {("de", "el"): "del", ("a", "el"): "al"}
EXAMPLE = ("el gato negro duerme en casa", "the black cat sleeps at home")


@dataclass
class Phrase:
    """Spanish words, English words and the links between them (Spanish i, English j)."""

    es: list[str] = field(default_factory=list)
    en: list[str] = field(default_factory=list)
    links: list[tuple[int, int]] = field(default_factory=list)

    def add(
        self, es: list[str], en: list[str], links: list[tuple[int, int]] | None = None
    ) -> Phrase:
        """Append words; ``links`` index into the new words (default: all-to-all)."""
        if links is None:
            links = [(i, j) for i in range(len(es)) for j in range(len(en))]
        self.links += [(len(self.es) + i, len(self.en) + j) for i, j in links]
        self.es += es
        self.en += en
        return self

    def extend(self, other: Phrase) -> Phrase:
        return self.add(other.es, other.en, other.links)


def _table(text: str) -> list[list[str]]:
    return [row.split() for row in re.split(r"[|\n]", text) if row.strip()]


_NOUNS = {r[0]: r for r in _table(NOUNS)}
_ADJS = _table(ADJECTIVES)
_VI = _table(INTRANSITIVE)
_VT = _table(TRANSITIVE)
_PREPS = _table(PREPOSITIONS)
_ADVS = _table(ADVERBS)


def _words(token: str) -> list[str]:
    return token.split("_")


class Grammar:
    """Draws sentences with a ``random.Random``; each method returns a ``Phrase``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def noun_phrase(self, nouns: list[str], depth: int = 0) -> tuple[Phrase, bool]:
        """DET N [ADJ] [de NP] → DET [ADJ] N [of NP]; returns the phrase and whether it is plural."""
        rng = self.rng
        es_sg, es_pl, gender, en_sg, en_pl = _NOUNS[rng.choice(nouns)]
        kind = rng.choice(["def", "def", "def", "indef", "this", "my", "many", "two"])
        forms, det_sg, det_pl = DETERMINERS[kind]
        plural = det_sg is None or rng.random() < 0.35
        det = forms[(gender == "f") + 2 * plural]
        adj = rng.choice(_ADJS) if rng.random() < 0.6 else None
        en_det = det_pl if plural else det_sg
        en_adj = [adj[4]] if adj else []
        if en_det == "a" and (en_adj or [en_sg])[0][0] in "aeiou":
            en_det = "an"
        p = Phrase().add([det], [en_det])
        # Spanish: noun then adjective; English: adjective then noun (the crossing).
        noun_es, noun_en = (es_pl, en_pl) if plural else (es_sg, en_sg)
        if adj:
            adj_es = adj[(gender == "f") + 2 * plural]
            p.add([noun_es, adj_es], [adj[4], noun_en], [(0, 1), (1, 0)])
        else:
            p.add([noun_es], [noun_en])
        if (
            depth == 0 and rng.random() < 0.15
        ):  # genitive: la casa del hombre → the house of the man
            owner, _ = self.noun_phrase(ANIMATE, depth + 1)
            p.extend(self._preposition(["de"], ["of"], owner))
        return p, plural

    def _preposition(self, es: list[str], en: list[str], np: Phrase) -> Phrase:
        """Preposition + NP, contracting de/a + el into del/al (→ two English words)."""
        p = Phrase()
        if (es[-1], np.es[0]) in CONTRACTIONS:
            fused = CONTRACTIONS[(es[-1], np.es[0])]
            if len(es) > 1:  # cerca del parque → near the park: "cerca" ~ near, "del" ~ the
                p.add(es[:-1], en).add([fused], np.en[:1])
            else:  # la casa del hombre → the house of the man: "del" ~ "of the"
                p.add([fused], en + np.en[:1])
            rest = Phrase(
                np.es[1:], np.en[1:], [(i - 1, j - 1) for i, j in np.links if i > 0 and j > 0]
            )
            return p.extend(rest)
        return p.add(es, en).extend(np)

    def prepositional_phrase(self) -> Phrase:
        rng = self.rng
        if rng.random() < 0.15:
            return Phrase().add(["en", "casa"], ["at", "home"], [(0, 0), (1, 1)])
        prep_es, prep_en = rng.choice(_PREPS)
        np, _ = self.noun_phrase(PLACES + THINGS if prep_es != "con" else ANIMATE + THINGS, depth=1)
        return self._preposition(_words(prep_es), _words(prep_en), np)

    def verb_phrase(self, plural: bool) -> Phrase:
        rng = self.rng
        roll = rng.random()
        if roll < 0.45:
            es_sg, es_pl, en_sg, en_pl = rng.choice(_VI)
            p = Phrase().add([es_pl if plural else es_sg], [en_pl if plural else en_sg])
        elif roll < 0.85:
            es_sg, es_pl, en_sg, en_pl = rng.choice(_VT)
            p = Phrase().add([es_pl if plural else es_sg], _words(en_pl if plural else en_sg))
            p.extend(self.noun_phrase(THINGS + ANIMATE, depth=1)[0])
        else:  # motion: va al parque → goes to the park
            p = Phrase().add(["van" if plural else "va"], ["go" if plural else "goes"])
            p.extend(self._preposition(["a"], ["to"], self.noun_phrase(PLACES, depth=1)[0]))
        if rng.random() < 0.5:
            p.extend(self.prepositional_phrase())
        return p

    def clause(self) -> Phrase:
        subject, plural = self.noun_phrase(ANIMATE)
        p = subject.extend(self.verb_phrase(plural))
        if self.rng.random() < 0.3:
            adv_es, adv_en = self.rng.choice(_ADVS)
            p.add([adv_es], [adv_en])
        return p

    def sentence(self) -> Phrase:
        p = self.clause()
        if self.rng.random() < 0.25:
            p.add(["y"], ["and"]).extend(self.clause())
        return p


@dataclass(frozen=True)
class Pair:
    """One demo sentence pair with its gold alignment in Pharaoh format."""

    src: str
    tgt: str
    alignment: str


def generate(seed: int, sizes: dict[str, int], max_words: int = 20) -> dict[str, list[Pair]]:
    """Draw distinct sentence pairs and split them; deterministic for ``seed`` and ``sizes``.

    The heatmap example ("el gato negro duerme en casa") is kept out of every split, so
    the picture drawn after training always shows a sentence the model has not seen.

    Args:
        seed: random seed.
        sizes: pairs per split, e.g. {"train": 40000, "valid": 1000, "test": 1000}.
        max_words: longest sentence kept, in Spanish words.

    Returns:
        split name -> list of pairs, no Spanish sentence in two splits or twice in one.
    """
    grammar = Grammar(random.Random(seed))
    seen = {EXAMPLE[0]}
    total = sum(sizes.values())
    pairs: list[Pair] = []
    attempts = 0
    while len(pairs) < total:
        attempts += 1
        if attempts > 20 * total:
            raise RuntimeError(f"the demo grammar could not produce {total} distinct sentences")
        p = grammar.sentence()
        src = " ".join(p.es)
        if len(p.es) > max_words or src in seen:
            continue
        seen.add(src)
        links = " ".join(f"{i}-{j}" for i, j in sorted(p.links))
        pairs.append(Pair(src, " ".join(p.en), links))
    out, start = {}, 0
    for name, n in sizes.items():
        out[name] = pairs[start : start + n]
        start += n
    return out
