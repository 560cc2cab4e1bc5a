// A small English text the test vocabularies are trained on, so their merges look like a real
// tokenizer's (common words and word pieces become single tokens).
export const TRAINING_CORPUS = `The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran away into the forest.
Once upon a time there was a small village by the river. The people of the village worked in the fields every day,
and in the evening they would gather around the fire to tell stories about the old times.
A mixture of experts model routes every token to a few of its experts. Each expert is a small feed forward network,
and the router decides which experts should process the token. Only the selected experts are computed,
so the model can be very large while each token still needs only a little computation.
Inference runs one layer after another: attention first, then the feed forward block, then the next layer.
The weights of the experts can be stored on disk, kept in memory, or copied to the graphics card when they are needed.
What is the capital of France? The capital of France is Paris. What is the capital of Germany? It is Berlin.
Please write a short poem about the sea. The sea is wide and deep and blue; it sings at night and sleeps at noon.
How many days are there in a week? There are seven days in a week, twelve months in a year, and about thirty days in a month.
The numbers one, two, three, four, five, six, seven, eight, nine and ten are the first ten counting numbers.
She said that she would come back tomorrow morning, but nobody believed her because she had said the same thing yesterday.
They were walking through the city when it started to rain, so they went into a small coffee shop and waited.
I think that this is a good idea, but we should test it first. Let us write the tests before we change the code.
The function returns the sum of the values in the list. If the list is empty, it returns zero.
Hello, world! This is a test of the tokenizer. Tokenizers split text into pieces called tokens.
He opened the window and looked at the mountains in the distance. The morning light was soft and warm.
Learning a new language takes time and patience. Reading every day and speaking with other people helps a lot.
The children played in the garden while their parents prepared dinner in the kitchen.
Water boils at one hundred degrees and freezes at zero degrees on the Celsius scale.
The train leaves the station at half past eight and arrives in the capital two hours later.
Can you help me with my homework? Of course, I would be happy to help you with your questions.
Thank you very much for your help. You are welcome; it was a pleasure to work with you.
The history of science is full of people who asked simple questions and found surprising answers.
Music, painting and writing are ways in which people share their feelings and their ideas with each other.
The system should be fast, simple and reliable, and it should tell the user clearly what went wrong when something fails.
`;
