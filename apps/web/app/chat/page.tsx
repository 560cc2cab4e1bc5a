import { ChatView } from './chat-view';

export const metadata = { title: 'Chat · KailStream' };

export default function ChatPage() {
  return <ChatView />;
}
