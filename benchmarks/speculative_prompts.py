"""The prompts of `reame bench speculative` and `speculative-engine`: copying from the prompt, and chat."""

from __future__ import annotations

from typing import Final

PARAGRAPH: Final = (
    "The lighthouse stood on a rocky point at the edge of the bay, and for more than a century its keepers "
    "climbed the spiral stairs every evening to light the lamp. Ships passing in the night relied on its steady "
    "beam to avoid the reefs that lay hidden beneath the waves. When the light was finally automated, the last "
    "keeper moved to the village and spent his days telling stories about storms, shipwrecks and rescues. "
    "Children would gather around him after school, and he would show them the brass telescope he had kept, "
    "the logbooks filled with careful handwriting, and a photograph of the tower covered in ice after the "
    "great winter storm."
)

# About one misspelt word per sentence, as a draft written in a hurry has.
MISSPELT: Final = (
    "Our committee met on Tuesday to discus the new library budget. Everyone agreed that the current building "
    "is too small for the number of visitors we recieve each week. The treasurer explained that the government "
    "grant will cover about half of the cost of a new extension. The rest must come from local businesses and "
    "private donations, which the committee hopes to collect before the end of the year. Several members "
    "offered to contact the owners of the shops in the high street, and the secretary will write to the "
    "parents of the children who use the reading room. We will meet again next month to deside which "
    "architect to hire and to agree on a realistic shedule for the construction work."
)

CONTRACT: Final = (
    "SERVICE AGREEMENT\n\n"
    "1. Term. This agreement begins on 1 March 2024 and continues for twelve months unless ended earlier "
    "under clause 7.\n"
    "2. Services. The Provider will clean the Client's offices every weekday evening, including the kitchen, "
    "the meeting rooms and the washrooms, and will restock paper products and soap.\n"
    "3. Fees. The Client will pay 2,400 euros per month, invoiced on the first working day of each month.\n"
    "4. Late payment. Invoices not paid within thirty days of their date carry interest at one percent per "
    "month on the amount outstanding, and the Provider may suspend the services after a written reminder.\n"
    "5. Equipment. The Provider supplies all cleaning equipment and materials, which must be safe for use in "
    "an office and stored in the cupboard the Client makes available on the ground floor.\n"
    "6. Insurance. The Provider keeps public liability insurance of at least two million euros and shows the "
    "certificate to the Client on request.\n"
    "7. Termination. Either party may end this agreement by giving sixty days' notice in writing; the Client "
    "may end it at once if the Provider misses more than three scheduled cleanings in a calendar month.\n"
    "8. Confidentiality. The Provider's staff must not read, copy or remove any document they find in the "
    "offices, and must report any unlocked safe or cabinet to the Client the next morning.\n"
)

ORDER_EMAIL: Final = (
    "Hello, this is Margaret Oduya from Northfield Garden Supplies. I would like to order 40 bags of potting "
    "compost (item PC-220) and 12 terracotta planters, large size (item TP-L09), for delivery to our shop at "
    "14 Mill Lane, Northfield, NF3 8QT, before Friday 14 June. Please invoice our account number 55-10347 "
    "and send the confirmation to orders@northfield-garden.example. If the planters are out of stock, we "
    "accept the medium size instead. Our phone number is 0161 496 0732. Thank you, Margaret."
)

# (name, kind, user message); kind "copy" prompts are expected to gain, "chat" ones to hold.
PROMPTS: Final = (
    ("repeat", "copy", "Repeat the following paragraph exactly, without any comment:\n\n" + PARAGRAPH),
    (
        "fix-spelling", "copy",
        "Fix the spelling mistakes in the following paragraph. Answer with the corrected paragraph only.\n\n"
        + MISSPELT,
    ),
    (
        "quote-clause", "copy",
        CONTRACT + "\nHow can the agreement be ended, and what happens if an invoice is paid late? Reply only with "
        "the full text of the clauses that answer this, exactly as written above.",
    ),
    (
        "extract-json", "extract",
        "Extract these fields from the email below as a JSON object: customer_name, company, items (a list of "
        "objects with item_code, description and quantity), delivery_address, deliver_before, account_number, "
        "email, phone. Answer with the JSON only.\n\n" + ORDER_EMAIL,
    ),
    ("story", "chat", "Write a short story about a robot who learns to paint."),
    ("explain", "chat", "Explain how a refrigerator keeps food cold, in simple terms."),
    ("advice", "chat", "Give me five practical tips for learning a new language as an adult."),
)
