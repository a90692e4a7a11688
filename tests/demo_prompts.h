/* tests/demo_prompts.h — the 20 English prompts the demo-model speculative tests run
 * (test_spec_demo, test_spec_text; the same texts as spec_cli.py's DEMO_PROMPTS). */
#ifndef DF_TESTS_DEMO_PROMPTS_H
#define DF_TESTS_DEMO_PROMPTS_H

static const char *const demo_prompts[20] = {
    "The history of the city begins with",
    "She opened the letter and read",
    "In the morning the market was",
    "The committee decided that the new rules",
    "He had never seen so many people",
    "The president said on Tuesday that",
    "After the war, the family moved to",
    "The water in the lake was cold and",
    "It was the first time that the team",
    "The old man looked at the boy and said",
    "Scientists have found that the",
    "The church stood at the end of a long road",
    "When the music stopped, everyone",
    "Most of the students in the class",
    "The report shows that the cost of",
    "There was a knock at the door, and",
    "The governor announced a plan to",
    "In the spring of that year the farmers",
    "Her voice was soft, but",
    "The book tells the story of a young",
};

#endif
