"""A synthetic intent-classification corpus from templates (the spec's offline stand-in for BBII intent recognition).

Six intents, ten templates each with slot vocabularies, optional filler phrases, a 20 % chance of
a distractor word from another intent, and label noise on the training split only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INTENTS = ("book_flight", "weather", "play_music", "set_alarm", "order_food", "check_balance")

SLOTS = {
    "city": ["Paris", "Rome", "Tokyo", "Berlin", "Lisbon", "Cairo", "Toronto", "Madrid", "Oslo", "Lima",
             "Seoul", "Dublin", "Vienna", "Prague", "Boston", "Denver"],
    "date": ["tomorrow", "on Friday", "next week", "on Monday", "tonight", "this weekend", "on the 5th",
             "in June", "next Tuesday", "today"],
    "song": ["Yesterday", "Bohemian Rhapsody", "Hey Jude", "Clair de Lune", "Imagine", "Hotel California",
             "Blue in Green", "Wonderwall", "Respect", "Purple Rain"],
    "artist": ["Miles Davis", "Adele", "the Beatles", "Queen", "Nina Simone", "Daft Punk", "Bach", "Prince"],
    "genre": ["jazz", "rock", "classical music", "hip hop", "lo-fi beats", "country", "reggae"],
    "time": ["6 am", "7:30", "noon", "5:45 in the morning", "half past eight", "9 pm", "six o'clock"],
    "dish": ["a pizza", "sushi", "two burritos", "pad thai", "a salad", "ramen", "curry", "dumplings"],
    "place": ["the Thai place", "the pizzeria", "the corner diner", "the sushi bar", "the Indian restaurant"],
    "account": ["checking", "savings", "credit card", "joint", "business"],
    "amount": ["50 dollars", "200 euros", "a thousand", "the rent", "my paycheck"],
}

TEMPLATES = {
    "book_flight": ["book a flight to {city} {date}", "I need a plane ticket from {city} to {city}",
                    "find me flights to {city} leaving {date}", "reserve a seat on a flight to {city}",
                    "are there cheap flights from {city} {date}", "get me on the next plane to {city}",
                    "I want to fly to {city} {date}", "book two tickets to {city} for {date}",
                    "search airfare to {city}", "schedule a flight out of {city} {date}"],
    "weather": ["what's the weather in {city} {date}", "will it rain in {city} {date}",
                "how hot will it be {date}", "is it going to snow in {city}",
                "give me the forecast for {city}", "do I need an umbrella {date}",
                "how cold is it in {city} right now", "weather report for {city} {date}",
                "will it be sunny {date}", "tell me the temperature in {city}"],
    "play_music": ["play {song} by {artist}", "put on some {genre}", "I want to hear {artist}",
                   "start playing {song}", "shuffle my {genre} playlist", "play something by {artist}",
                   "turn on {genre} music", "can you play {song}", "queue up {artist}",
                   "let's listen to some {genre}"],
    "set_alarm": ["set an alarm for {time}", "wake me up at {time} {date}", "alarm at {time} please",
                  "remind me at {time} to leave", "set my alarm to {time}", "I need to get up at {time}",
                  "create an alarm for {time} {date}", "change my alarm to {time}",
                  "make sure I'm awake by {time}", "set a wake up call at {time}"],
    "order_food": ["order {dish} from {place}", "I'd like {dish} delivered", "get me {dish} for dinner",
                   "can you order {dish}", "I'm hungry, order from {place}", "deliver {dish} to my house",
                   "place an order for {dish} at {place}", "I want {dish} tonight",
                   "order takeout from {place}", "send {dish} over {date}"],
    "check_balance": ["what's my {account} balance", "how much money is in my {account} account",
                      "check my {account} account", "do I have {amount} in {account}",
                      "show me the balance of my {account}", "how much do I have left",
                      "can I afford {amount}", "tell me my {account} account balance",
                      "what's left in {account} after {amount}", "balance inquiry for my {account} account"],
}

FILLERS = ["please", "hey", "could you", "quickly", "um", "thanks", "if possible", "right away", "okay so"]

DISTRACTORS = {
    "book_flight": ["airport", "ticket", "plane"],
    "weather": ["rain", "sunny", "forecast"],
    "play_music": ["song", "playlist", "music"],
    "set_alarm": ["alarm", "wake", "morning"],
    "order_food": ["pizza", "hungry", "dinner"],
    "check_balance": ["money", "account", "bank"],
}


@dataclass(frozen=True)
class Corpus:
    """Sentences and integer labels of one split (``clean`` holds the labels before noise)."""

    texts: list[str]
    labels: np.ndarray
    clean: np.ndarray


def sentence(intent: int, rng: np.random.Generator) -> str:
    """One utterance of ``intent``: a template with slots filled, maybe a filler and a distractor."""
    name = INTENTS[intent]
    text = TEMPLATES[name][rng.integers(len(TEMPLATES[name]))]
    while "{" in text:
        start = text.index("{")
        slot = text[start + 1: text.index("}", start)]
        text = text.replace("{" + slot + "}", SLOTS[slot][rng.integers(len(SLOTS[slot]))], 1)
    if rng.random() < 0.4:
        filler = FILLERS[rng.integers(len(FILLERS))]
        text = f"{filler} {text}" if rng.random() < 0.5 else f"{text} {filler}"
    if rng.random() < 0.2:
        other = INTENTS[(intent + 1 + rng.integers(len(INTENTS) - 1)) % len(INTENTS)]
        text = f"{text} {DISTRACTORS[other][rng.integers(3)]}"
    return text


def make_split(n: int, rng: np.random.Generator, label_noise: float = 0.0) -> Corpus:
    """``n`` utterances with uniform intents; a ``label_noise`` share of labels replaced by another intent."""
    clean = rng.integers(len(INTENTS), size=n)
    texts = [sentence(int(c), rng) for c in clean]
    labels = clean.copy()
    flip = rng.random(n) < label_noise
    labels[flip] = (clean[flip] + 1 + rng.integers(len(INTENTS) - 1, size=int(flip.sum()))) % len(INTENTS)
    return Corpus(texts, labels, clean)
